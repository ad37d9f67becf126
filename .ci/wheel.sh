#!/usr/bin/env bash
# `make test-wheel`: the Python wheel as a user installs it. maturin (pinned, from the package
# registry) builds the wheel from pyproject.toml with the release profile; a fresh venv in a
# temporary directory installs that wheel alone; then, from the venv, `anvil-load --version`
# must name this checkout's commit and a smoke run against the embedded simulator must exit 0
# and write its artifact. Everything it makes but the wheel (target/wheels) is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN_VERSION=1.16.0
PYTHON=${PYTHON:-python3}

work=$(mktemp -d "${TMPDIR:-/tmp}/anvil-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

step() { printf '== %s\n' "$*"; }

step "maturin $MATURIN_VERSION into a build venv"
"$PYTHON" -m venv "$work/build"
timeout 300 "$work/build/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"

step "the wheel (release profile)"
rm -f target/wheels/anvil_load-*.whl
started=$(date +%s)
timeout 2400 "$work/build/bin/maturin" build --release --locked --out target/wheels
built=$(($(date +%s) - started))
wheels=(target/wheels/anvil_load-*.whl)
[ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "expected one wheel in target/wheels, found: ${wheels[*]}" >&2; exit 1; }
wheel=${wheels[0]}
echo "built $wheel in ${built}s: wheel $(du -k "$wheel" | cut -f1) KiB, target/release/anvil-load $(du -k target/release/anvil-load | cut -f1) KiB"

step "a fresh venv with the wheel alone"
"$PYTHON" -m venv "$work/venv"
timeout 300 "$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
bin="$work/venv/bin/anvil-load"
[ -x "$bin" ] || { echo "the wheel put no anvil-load on the venv's PATH" >&2; exit 1; }

step "--version names the commit"
version=$("$bin" --version)
echo "$version"
if commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  case "$version" in
    "anvil-load "*"($commit "*|"anvil-load "*"($commit-dirty "*) ;;
    *) echo "--version does not name the commit $commit: $version" >&2; exit 1 ;;
  esac
fi

step "a smoke run against the embedded simulator, from the venv"
# From another directory, with the scenario by absolute path: nothing of the checkout but the
# scenario file is used.
scenario="$PWD/scenarios/smoke.toml"
(cd "$work" && timeout 300 "$bin" "$scenario" --quiet --out "$work/results")
artifacts=("$work"/results/anvil-*.json)
[ -f "${artifacts[0]}" ] || { echo "the smoke run wrote no artifact" >&2; exit 1; }
echo "artifact: $(basename "${artifacts[0]}")"
timeout 60 "$bin" completions bash | grep -q -- '--base-url' || { echo "completions bash names no --base-url" >&2; exit 1; }
echo "wheel ok: $wheel"
