#!/usr/bin/env bash
# slurm_test.sh BINARY SOURCE_DIR: `infer-bench load` sharded by a Slurm job array on a one-node
# cluster this test starts (munged, slurmctld, slurmd from Debian's slurm-wlm packages, all in a
# temporary directory on ports of their own): two array tasks each send their shard of one
# seeded load to `infer-bench serve` from a common start, and `infer-bench merge` joins their
# result files into the whole load (12 requests, each once). Exit 77 (skipped), saying why, when
# the Slurm or munge daemons are not installed or the cluster does not come up.
set -uo pipefail
bin=$(realpath "$1")
src=$(realpath "$2")
skip() { echo "slurm_test: SKIPPED: $*"; exit 77; }
fail() { echo "slurm_test: FAILED: $*"; exit 1; }
for t in munged slurmctld slurmd sbatch sinfo; do
  command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || skip "$t is not installed (Debian: slurmctld slurmd slurm-client munge)"
done
PATH=$PATH:/usr/sbin
d=$(mktemp -d /tmp/ib-slurm.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$d"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mkdir -p "$d/state" "$d/spool" "$d/munge"
chmod 700 "$d/munge"
head -c 1024 /dev/urandom >"$d/munge/munge.key"
chmod 400 "$d/munge/munge.key"
munged --force --key-file="$d/munge/munge.key" --socket="$d/munge/sock" --pid-file="$d/munge/pid" \
  --log-file="$d/munge/log" --seed-file="$d/munge/seed" || skip "munged did not start: $(tail -2 "$d/munge/log" 2>/dev/null)"
pids+=("$(cat "$d/munge/pid")")
cat >"$d/slurm.conf" <<CONF
ClusterName=ibtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName=ibnode NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=ib Nodes=ibnode Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$d/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$d/ctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N ibnode >"$d/slurmd.out" 2>&1 &
pids+=($!)
up=""
for _ in $(seq 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed)'; then up=1; break; fi
  sleep 0.5
done
[ -n "$up" ] || skip "the one-node cluster did not come up: $(tail -2 "$d/slurmctld.log" "$d/slurmd.log" 2>/dev/null | tr '\n' ' ')"
echo "slurm_test: a one-node cluster is up ($(sinfo -h -o '%P %D %T'))"

"$bin" serve "$src/data/models/ib-draft-1m" --port 0 --max-seqs 8 2>"$d/serve.err" &
pids+=($!)
url=""
for _ in $(seq 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$d/serve.err" | head -1)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || fail "the server did not start: $(cat "$d/serve.err")"
start=$(python3 -c 'import time; print(f"{time.time() + 4:.3f}")')
# The array's tasks: each its shard of the one schedule, from the common start.
sbatch --wait --array=0-1 --output="$d/task-%a.out" --chdir="$d" --wrap \
  "$bin load $src/experiments/load.yaml -q -o $d/run-\$SLURM_ARRAY_TASK_ID --endpoint $url --weights $src/data/models/ib-draft-1m --requests 12 --qps 10 --prompt-len 16 --output-len 4 --set shard=\$SLURM_ARRAY_TASK_ID/\$SLURM_ARRAY_TASK_COUNT --set start_at=$start --set save_result=$d/shard-\$SLURM_ARRAY_TASK_ID.json" \
  >"$d/sbatch.out" 2>&1 || fail "sbatch --wait: $(cat "$d/sbatch.out") $(cat "$d"/task-*.out 2>/dev/null | tail -5)"
for i in 0 1; do [ -f "$d/shard-$i.json" ] || fail "task $i wrote no result: $(tail -5 "$d/task-$i.out" 2>/dev/null)"; done
out=$("$bin" merge "$d/shard-0.json" "$d/shard-1.json" -o "$d/whole.json") || fail "merge: $out"
echo "$out" | grep -q '| 12 | 12 | 0 |' || fail "the merged load is not 12 requests, all completed: $out"
python3 - "$d/whole.json" <<'PY' || fail "the merged file"
import json, sys
w = json.load(open(sys.argv[1]))
ids = [q["id"] for q in w["infer_bench"]["requests"]]
assert ids == list(range(12)), ids
assert w["completed"] == 12 and w["num_prompts"] == 12
PY
echo "slurm_test: a 2-task job array's shards merged into the whole load (12 of 12 requests)"
