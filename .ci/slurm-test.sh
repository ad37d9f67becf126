#!/usr/bin/env bash
# The Slurm deployment, for real: a one-node Slurm cluster on this machine (munged, slurmctld,
# slurmd; configuration written here, CPUs oversubscribed), deploy/slurm/anvil-load.sbatch
# submitted with 4 tasks against one `anvil-load mock` on loopback, then the result checked: four
# shard records files whose request indices are disjoint and together cover the plan, each shard's
# part the one its index says, and the merge step run; then again with ANVIL_SYNC=coordinator (a
# two-level sweep through the script's authenticated coordinator, merged by task 0). Every daemon
# started here is stopped on exit, whatever happens. Runs as root (it installs Slurm from the
# system packages when missing).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tasks=4
requests=96
limit=240 # seconds for the whole job, start-up included

say() { printf 'slurm-test: %s\n' "$*"; }
die() { printf 'slurm-test: FAILED: %s\n' "$*" >&2; exit 1; }

# --- Tools: Slurm and MUNGE from the system packages; a missing one fails loudly. ---
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    [ "$(id -u)" = 0 ] || die "Slurm is not installed and installing it needs root (apt-get install slurm-wlm munge)"
    command -v apt-get >/dev/null || die "Slurm is not installed and there is no apt-get to install it (needs slurm-wlm and munge)"
    say "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq slurm-wlm munge >/dev/null || die "apt-get install slurm-wlm munge failed"
fi
for tool in slurmctld slurmd munged sbatch squeue sinfo scontrol scancel python3; do
    command -v "$tool" >/dev/null || die "$tool is not on PATH"
done

cd "$root"
cargo build --locked --quiet --bin anvil-load
bin=$root/target/debug/anvil-load
[ -x "$bin" ] || die "no anvil-load binary at $bin"

work=$(mktemp -d /tmp/anvil-slurm.XXXXXX)
pids=()
job=""
cleanup() {
    set +e
    [ -n "$job" ] && scancel "$job" 2>/dev/null
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    if [ "${keep:-0}" = 1 ]; then say "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- MUNGE, on its own socket and key (the package's key when there is one). ---
mkdir -p "$work/munge"
chmod 700 "$work/munge"
if [ -r /etc/munge/munge.key ]; then
    cp /etc/munge/munge.key "$work/munge/munge.key"
else
    dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
fi
chmod 400 "$work/munge/munge.key"
socket=$work/munge/munge.socket
munged --foreground --force --socket="$socket" --key-file="$work/munge/munge.key" \
    --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
    --seed-file="$work/munge/munged.seed" >"$work/munge/stdout.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { keep=1; die "munged did not start (see $work/munge)"; }

# --- A one-node cluster on this host: 8 CPUs declared whatever the host has, so 4 tasks fit. ---
node=$(hostname -s)
ctld_port=$(free_port)
slurmd_port=$(free_port)
mkdir -p "$work/state" "$work/spool"
export SLURM_CONF=$work/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=anvil-ci
SlurmctldHost=${node}(127.0.0.1)
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=${socket}
CredType=cred/munge
StateSaveLocation=${work}/state
SlurmdSpoolDir=${work}/spool
SlurmctldPidFile=${work}/slurmctld.pid
SlurmdPidFile=${work}/slurmd.pid
SlurmctldLogFile=${work}/slurmctld.log
SlurmdLogFile=${work}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=${node} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=ci Nodes=${node} Default=YES MaxTime=10 State=UP
CONF

slurmctld -D -i -f "$SLURM_CONF" >"$work/slurmctld.stdout" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$node" >"$work/slurmd.stdout" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 120); do
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n1 || true)
    [ "$state" = idle ] && break
    sleep 0.5
done
[ "$state" = idle ] || { keep=1; die "the node did not become idle (state '${state}'; logs in $work)"; }
say "cluster up: node $node idle"

# --- The server under test, and the job. ---
mock_port=$(free_port)
"$bin" mock --listen "127.0.0.1:${mock_port}" --profile fast >"$work/mock.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', ${mock_port}), 0.2)" 2>/dev/null && break
    sleep 0.1
done
cat >"$work/scenario.toml" <<TOML
[target]
model = "anvil-sim"

[run]
requests = ${requests}
seed = 5

[load]
concurrency = 8

[workload]
context_tokens = { 512 = 3, 2048 = 1 }
max_context_tokens = 32768
max_tokens = 16
tokenizer = "estimate"
TOML
# submit SYNC OUT SCENARIO: run the script as a job of $tasks tasks; sets $job, prints its output.
# --time on the command line overrides the script's 2 hours, as a user's would: a job asking for
# more than the partition's MaxTime (10 minutes here) stays pending (PartitionTimeLimit) forever.
submit() {
    local sync=$1 results=$2 file=$3 started state code
    started=$(date +%s)
    job=$(cd "$work" && ANVIL_BIN="$bin" ANVIL_OUT="$results" ANVIL_LEAD=10 ANVIL_SYNC="$sync" \
        ANVIL_PORT="$(free_port)" \
        sbatch --parsable --ntasks="$tasks" --time=5 --chdir="$work" --output="$work/job-%j.out" \
        "$root/deploy/slurm/anvil-load.sbatch" "$file" --base-url "http://127.0.0.1:${mock_port}/v1")
    job=${job%%;*}
    say "submitted job $job ($tasks tasks, $sync)"
    while squeue -h -j "$job" 2>/dev/null | grep -q .; do
        if [ $(( $(date +%s) - started )) -gt "$limit" ]; then
            keep=1
            # A job that never started says why (Resources, PartitionTimeLimit, …).
            state=$(squeue -h -j "$job" -o '%T, reason %r' 2>/dev/null || true)
            die "job $job still in the queue after ${limit}s (${state:-state unknown}; see $work/job-$job.out)"
        fi
        sleep 1
    done
    state=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
    code=$(scontrol show job "$job" 2>/dev/null | grep -o ' ExitCode=[0-9:]*' | cut -d= -f2 || true)
    say "job $job: ${state:-unknown} (exit ${code:-?}) after $(( $(date +%s) - started ))s"
    cat "$work/job-$job.out"
    if [ "$state" != COMPLETED ]; then keep=1; die "job $job ended ${state:-unknown}"; fi
    # The script's own request, as the job got it: 2 CPUs for each task.
    per_task=$(scontrol show job "$job" 2>/dev/null | grep -o 'CPUs/Task=[0-9]*' | cut -d= -f2 || true)
    [ "$per_task" = 2 ] || { keep=1; die "job $job ran with ${per_task:-?} CPUs per task, not the script's 2"; }
}

# check OUT SYNC LEVELS: every shard's part, and nothing twice, in every level.
check() {
    python3 - "$1" "$tasks" "$requests" "$2" "$3" <<'PY' || { keep=1; die "the shard records do not tile the plan ($2)"; }
import glob, json, sys
out, tasks, requests, sync, levels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
files = sorted(glob.glob(f"{out}/*.shard*of{tasks}.records.ndjson"))
assert len(files) == tasks, f"{len(files)} shard records files, expected {tasks}: {files}"
seen, run_ids = {}, set()
for path in files:
    lines = [json.loads(l) for l in open(path)]
    info = lines[0]["info"]
    shard = info["shard"]
    assert shard["count"] == tasks and shard["sync"] == sync, shard
    run_ids.add(info["run_id"])
    ends = [l for l in lines if l["type"] == "level_end"]
    assert len(ends) == levels and not any(e["interrupted"] for e in ends), f"{path}: levels not finished cleanly"
    for l in lines:
        if l["type"] in ("request", "failure"):
            key = (l["level"], l["request_index"])
            assert l["request_index"] % tasks == shard["index"], f"shard {shard['index']} sent request {key}"
            assert key not in seen, f"request {key} sent by shards {seen[key]} and {shard['index']}"
            seen[key] = shard["index"]
assert len(run_ids) == 1, f"the shards disagree on the run id: {run_ids}"
per_level = {}
for level, i in seen:
    per_level.setdefault(level, []).append(i)
assert len(per_level) == levels, per_level.keys()
for level, indices in per_level.items():
    assert sorted(indices) == list(range(requests)), f"{level}: missing requests {sorted(set(range(requests)) - set(indices))}"
print(f"slurm-test: {tasks} shards ({sync}), {levels} level(s) of {requests} requests, each once, run {run_ids.pop()}")
PY
}

started_all=$(date +%s)
out=$work/results
submit start-at "$out" "$work/scenario.toml"
check "$out" start_at 1
if "$bin" help merge >/dev/null 2>&1; then
    ls "$out/merged"/*.json >/dev/null 2>&1 || { keep=1; die "the merge step wrote no artifact"; }
fi

# The coordinated run: a sweep of two levels, authenticated with the token the script generates.
sed 's/^concurrency = 8$/concurrency = [4, 8]/' "$work/scenario.toml" >"$work/sweep.toml"
out2=$work/results-coordinated
submit coordinator "$out2" "$work/sweep.toml"
check "$out2" coordinator 2
merged=$(find "$out2" -maxdepth 1 -name '*.json' ! -name '*.shard*' ! -name '*-sweep.json' | wc -l)
[ "$merged" -eq 2 ] || { keep=1; die "the coordinator merged $merged artifacts, expected 2"; }
grep -q 'authenticated with ANVIL_SHARD_TOKEN' "$work/job-$job.out" || { keep=1; die "the coordinator was not authenticated"; }
if grep -Eq 'slurm-[0-9]+-[0-9a-f]{64}' "$work/job-$job.out" "$out2"/* 2>/dev/null; then
    keep=1
    die "the generated token was written to the job's output or results"
fi
say "passed in $(( $(date +%s) - started_all ))s after the first submission"
