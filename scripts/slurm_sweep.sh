#!/usr/bin/env bash
# `headprint sweep` as a Slurm job array, for real, on a one-node Slurm brought up on this
# machine (issue 42, item 6; docs/sweeps.md, "Tried on a one-node Slurm").
#
#   sudo scripts/slurm_sweep.sh            # or as root; SHARDS=3 CHECKPOINTS=6 by default
#
# It installs Debian's slurm-wlm and munge when they are missing (apt-get), writes a minimal
# slurm.conf for this host (its CPUs and memory, select/cons_tres), starts munged, slurmctld and
# slurmd, waits until `sinfo` shows the node idle, and builds target/release/headprint if it is
# missing. It then writes CHECKPOINTS local checkpoints (`ckpt/step{N}`: the gpt2 fixture with
# one attention tensor scaled per step, so every unit's numbers differ), submits
#
#   sbatch --array=0-(SHARDS-1) --wrap "headprint sweep ckpt/step* --out shards"
#
# (no --shard: Slurm's SLURM_ARRAY_TASK_* variables choose each task's part), waits for the
# array with squeue, and checks that the shards' Parquet files are exactly the unit list, each
# unit computed by exactly one task, and equal cell for cell to an unsharded `headprint sweep`
# of the same units (pyarrow, from the project's .venv, else the files' bytes). Last it stops
# the daemons it started (by their process ids). No network but apt-get's.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${SLURM_SWEEP_DIR:-/tmp/headprint-slurm}
SHARDS=${SHARDS:-3}
CHECKPOINTS=${CHECKPOINTS:-6}
BIN=${HEADPRINT:-$ROOT/target/release/headprint}
PYTHON=${PYTHON:-}
for candidate in "$ROOT/.venv/bin/python" /work/main/.venv/bin/python python3; do
    if [[ -z $PYTHON ]] && "$candidate" -c 'import pyarrow' 2>/dev/null; then PYTHON=$candidate; fi
done

say() { printf '[slurm_sweep] %s\n' "$*"; }
die() { say "FAILED: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root: it starts munged, slurmctld and slurmd"

# --- Slurm and munge ----------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null
fi
say "$(slurmctld -V)"

if [[ ! -x $BIN ]]; then
    say "building $BIN"
    (cd "$ROOT" && cargo build --release --bin headprint)
fi

# Only a folder this script made before (or an empty one) is cleared.
if [[ -d $WORK && -n $(ls -A "$WORK") && ! -f $WORK/slurm.conf ]]; then
    die "$WORK is not empty and not this script's: set SLURM_SWEEP_DIR"
fi
rm -rf "$WORK"
mkdir -p "$WORK"/{state,spool,logs,run}
HOST=$(hostname -s)
CPUS=$(nproc)
# Slurm's view of the node's memory, less a margin for the daemons (MB).
MEMORY=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
CONF=$WORK/slurm.conf
cat >"$CONF" <<EOF
ClusterName=headprint
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/run/slurmctld.pid
SlurmdPidFile=$WORK/run/slurmd.pid
SlurmctldLogFile=$WORK/logs/slurmctld.log
SlurmdLogFile=$WORK/logs/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEMORY State=UNKNOWN
PartitionName=main Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$CONF

PIDS=()
stop() {
    # Only what this script started, by process id.
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT

mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- munged --foreground >"$WORK/logs/munged.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
fi
munge -n | unmunge >/dev/null || die "munged does not answer ($WORK/logs/munged.log)"

slurmctld -D -i -f "$CONF" >>"$WORK/logs/slurmctld.out" 2>&1 &
PIDS+=($!)
sleep 1
slurmd -D -f "$CONF" >>"$WORK/logs/slurmd.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 60); do
    state=$(sinfo -h -N -o '%t' 2>/dev/null | head -1 || true)
    [[ $state == idle ]] && break
    sleep 1
done
[[ ${state:-} == idle ]] || { tail -n 20 "$WORK"/logs/*.log; die "the node is not idle (sinfo says '${state:-nothing}')"; }
say "node $HOST idle: $CPUS CPUs, ${MEMORY} MB"
sinfo

# --- Checkpoints and the sweep -------------------------------------------------------------
python3 - "$ROOT/tests/fixtures/gpt2" "$WORK/ckpt" "$CHECKPOINTS" <<'EOF'
# step{N}: the gpt2 fixture with layer 0's QKV weights scaled by 1 + i/10, so each differs.
import array, json, shutil, struct, sys, pathlib
source, out, count = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
raw = (source / "model.safetensors").read_bytes()
size = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + size])
for i in range(count):
    step = 1000 * i
    folder = out / f"step{step}"
    folder.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(source / name, folder / name)
    data = bytearray(raw)
    info = header["transformer.h.0.attn.c_attn.weight"]
    start, end = (8 + size + o for o in info["data_offsets"])
    assert info["dtype"] == "F32"
    values = array.array("f", bytes(data[start:end]))
    data[start:end] = array.array("f", (v * (1 + i / 10) for v in values)).tobytes()
    (folder / "model.safetensors").write_bytes(bytes(data))
EOF
UNITS=("$WORK"/ckpt/step*)
say "${#UNITS[@]} units: ${UNITS[*]##*/}"

started=$(date +%s%N)
JOB=$(sbatch --parsable --array=0-$((SHARDS - 1)) --cpus-per-task=1 --job-name=headprint-sweep \
    --output="$WORK/logs/%A_%a.out" --chdir="$WORK" \
    --wrap "$BIN sweep ${UNITS[*]} --out $WORK/shards --backend cpu")
say "submitted array job $JOB (--array=0-$((SHARDS - 1)))"
while squeue -h -j "$JOB" 2>/dev/null | grep -q .; do sleep 1; done
array_ms=$(( ($(date +%s%N) - started) / 1000000 ))
scontrol show job "$JOB" | grep -E 'JobId=|ArrayTaskId=|JobState=|ExitCode=|NodeList=' | sed 's/^ */    /' | grep -v ReqNodeList || true

# Every task ended well, and every unit was computed by exactly one of them.
failed=0
for task in $(seq 0 $((SHARDS - 1))); do
    log=$WORK/logs/${JOB}_$task.out
    [[ -f $log ]] || die "no log of task $task"
    say "task $task: $(head -1 "$log")"
    grep -q ' 0 failed' "$log" || { failed=1; cat "$log"; }
done
[[ $failed == 0 ]] || die "a task failed"
computed=$(cat "$WORK"/logs/"${JOB}"_*.out | awk '$1 == "computed" {print $2}' | sort)
expected=$(printf '%s\n' "${UNITS[@]}" | sort)
[[ $computed == "$expected" ]] || die "units computed by the tasks: $(echo $computed) vs $(echo $expected)"

started=$(date +%s%N)
"$BIN" sweep "${UNITS[@]}" --out "$WORK/full" --backend cpu >"$WORK/logs/unsharded.out"
full_ms=$(( ($(date +%s%N) - started) / 1000000 ))

shard_files=$(cd "$WORK/shards" && ls -A)
full_files=$(cd "$WORK/full" && ls -A)
[[ $shard_files == "$full_files" ]] || die "file lists differ: $(echo $shard_files) vs $(echo $full_files)"
[[ $(echo "$shard_files" | wc -l) == "${#UNITS[@]}" ]] || die "$(echo "$shard_files" | wc -l) files for ${#UNITS[@]} units"

if [[ -n $PYTHON ]]; then
    "$PYTHON" - "$WORK/shards" "$WORK/full" <<'EOF'
import pathlib, sys
import pyarrow.parquet as pq
shards, full = (pathlib.Path(p) for p in sys.argv[1:])
rows = 0
for path in sorted(full.glob("*.parquet")):
    a, b = pq.read_table(shards / path.name), pq.read_table(path)
    assert a.equals(b), path.name
    assert a.column("error").null_count == a.num_rows, path.name
    rows += a.num_rows
together = pq.read_table(shards)
assert together.num_rows == rows and len(set(together.column("model").to_pylist())) == len(list(full.glob("*.parquet")))
print(f"[slurm_sweep] pyarrow: {len(list(full.glob('*.parquet')))} files, {rows} rows, every cell equal to the unsharded sweep's")
EOF
else
    for name in $full_files; do cmp -s "$WORK/shards/$name" "$WORK/full/$name" || die "$name differs"; done
    say "no pyarrow: the files are byte for byte the unsharded sweep's"
fi

# The same array again: every unit is written, so every task skips its part.
AGAIN=$(sbatch --parsable --array=0-$((SHARDS - 1)) --cpus-per-task=1 --job-name=headprint-sweep \
    --output="$WORK/logs/%A_%a.out" --chdir="$WORK" \
    --wrap "$BIN sweep ${UNITS[*]} --out $WORK/shards --backend cpu")
while squeue -h -j "$AGAIN" 2>/dev/null | grep -q .; do sleep 1; done
skipped=$(cat "$WORK"/logs/"${AGAIN}"_*.out | awk '$1 == "skipped"' | wc -l)
[[ $skipped == "${#UNITS[@]}" ]] || die "the resubmitted array $AGAIN skipped $skipped of ${#UNITS[@]} units"
say "resubmitted as array job $AGAIN: all ${#UNITS[@]} units skipped, nothing computed again"

printf '[slurm_sweep] PASSED: array job %s, %d shards, %d units (each once), %d.%03d s from submission to the last task; unsharded sweep %d.%03d s\n' \
    "$JOB" "$SHARDS" "${#UNITS[@]}" $((array_ms / 1000)) $((array_ms % 1000)) $((full_ms / 1000)) $((full_ms % 1000))
