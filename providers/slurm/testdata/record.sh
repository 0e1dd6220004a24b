#!/usr/bin/env bash
# record.sh OUT.json — records a real squeue --json holding a job in each
# state the provider maps, for state_test.go. Run against a scratch
# cluster with the cgroup plugins (for OUT_OF_MEMORY):
#   SLURM_CGROUP=1 scripts/slurm.sh up && eval "$(scripts/slurm.sh env)"
#   providers/slurm/testdata/record.sh providers/slurm/testdata/squeue-22.05.8.json
#   scripts/slurm.sh down
# It takes about two minutes (TIMEOUT needs a whole minute's limit), and
# takes the node down and up again at the end (NODE_FAIL).
set -euo pipefail
out=$1
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
node=$(sinfo --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["name"])')
scancel --partition="$(sinfo --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["partitions"][0])')" || true
sub() { local name=$1; shift; sbatch --parsable --export=NONE -J "$name" -o "$W/$name.out" -e "$W/$name.err" -D "$W" "$@"; }
sub COMPLETED --wrap 'true' >/dev/null
sub FAILED --wrap 'exit 3' >/dev/null
sub FAILED_SIGNAL --wrap 'exec kill -9 $$' >/dev/null   # the batch step dies of SIGKILL
c=$(sub CANCELLED --wrap 'sleep 600')
sub TIMEOUT -t 1 --wrap 'sleep 600' >/dev/null
sub OUT_OF_MEMORY --mem=64M --wrap 'head -c 400M /dev/zero | tail >/dev/null' >/dev/null
sub RUNNING --wrap 'sleep 600' >/dev/null
s=$(sub SUSPENDED --wrap 'sleep 600')
sub PENDING --hold --wrap 'true' >/dev/null
sleep 3
scancel "$c"; scontrol suspend "$s"
echo "waiting for TIMEOUT (up to 2 min)..." >&2
for _ in $(seq 150); do squeue --json | grep -q '"job_state": "TIMEOUT"' && break; sleep 1; done
squeue --json >"$W/a.json"
n=$(sub NODE_FAIL --no-requeue --wrap 'sleep 600'); sleep 3
scontrol update NodeName="$node" State=DOWN Reason=record.sh; sleep 2
squeue --json >"$W/b.json"
scontrol update NodeName="$node" State=RESUME 2>/dev/null || true   # ReturnToService=2 may have done it
scancel --partition="$(squeue --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["partition"])')" || true
python3 - "$W/a.json" "$W/b.json" "$out" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
a["jobs"] += [j for j in b["jobs"] if j["name"] == "NODE_FAIL"]
json.dump(a, open(sys.argv[3], "w"), indent=1)
print(sorted((j["name"], j["job_state"]) for j in a["jobs"]))
PY
