#!/usr/bin/env bash
# slurm.sh up|down|env — a single-node Slurm for development, as the tests'
# harness (internal/slurmtest) makes one: munged (shared, reused, left
# running), slurmctld and slurmd under $SLURM_DEV_DIR (default
# /tmp/cb-slurm-dev) on free loopback ports, node "cbdev" with 32 CPUs,
# 8 GiB and two fake GPUs (gres gpu:fake:2), partition "cbtest", no
# accounting; JWT accepted (AuthAltTypes=auth/jwt, key $D/jwt.key), and
# slurmrestd (-a rest_auth/jwt, as nobody) on a free loopback port when
# it is installed. Needs root and:
#   apt-get install -y munge slurmctld slurmd slurm-client slurmrestd
#   scripts/slurm.sh up      # prints: export SLURM_CONF=... SLURM_RESTD_URL=...
#   curl -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $(scontrol token | cut -d= -f2)" $SLURM_RESTD_URL/slurm/v0.0.38/nodes
#   eval "$(scripts/slurm.sh env)"; sbatch --wrap true; squeue --json
#   scripts/slurm.sh down    # cancels the jobs, stops the daemons, removes the dir
# SLURM_CGROUP=1 turns on the cgroup v1 plugins (jobs over --mem end OUT_OF_MEMORY).
set -euo pipefail
D=${SLURM_DEV_DIR:-/tmp/cb-slurm-dev}
NODE=cbdev PART=cbtest
export SLURM_CONF=$D/slurm.conf
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
alive() { [ -f "$1" ] && p=$(cat "$1") && [ -d /proc/$p ] && [ "$(awk '{print $3}' /proc/$p/stat)" != Z ]; }
case "${1:-}" in
up)
  for b in munged slurmctld slurmd sbatch squeue sinfo; do
    command -v $b >/dev/null || { echo "missing $b: apt-get install -y munge slurmctld slurmd slurm-client" >&2; exit 1; }
  done
  if alive "$D/slurmctld.pid"; then echo "already up: export SLURM_CONF=$SLURM_CONF$(cat "$D/restd.env" 2>/dev/null)"; exit 0; fi
  if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 100); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.05; done
  fi
  rm -rf "$D"; mkdir -p "$D/state" "$D/spool" "$D/log"
  # The JWT key (auth/jwt, for slurmrestd and scontrol token): readable
  # by SlurmUser (root) only.
  (umask 077; head -c 64 /dev/urandom >"$D/jwt.key")
  H=$(hostname -s) CP=$(freeport) DP=$(freeport)
  if [ "${SLURM_CGROUP:-0}" = 1 ]; then
    PT=proctrack/cgroup TP=task/cgroup,task/affinity JG=jobacct_gather/cgroup SP=$'CR_Core_Memory\nDefMemPerCPU=64'
  else
    PT=proctrack/linuxproc TP=task/none JG=jobacct_gather/linux SP=CR_Core
  fi
  cat >"$SLURM_CONF" <<CONF
ClusterName=cbdev
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$CP
SlurmdPort=$DP
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=$PT
TaskPlugin=$TP
JobAcctGatherType=$JG
SelectType=select/cons_tres
SelectTypeParameters=$SP
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
KillWait=2
GresTypes=gpu
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$D/jwt.key
NodeName=$NODE NodeHostname=$H NodeAddr=127.0.0.1 CPUs=32 RealMemory=8192 Gres=gpu:fake:2 State=UNKNOWN
PartitionName=$PART Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
  printf 'NodeName=%s Name=gpu Type=fake File=/dev/zero\nNodeName=%s Name=gpu Type=fake File=/dev/full\n' $NODE $NODE >"$D/gres.conf"
  printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainCores=yes\nConstrainRAMSpace=yes\nConstrainSwapSpace=no\n' >"$D/cgroup.conf"
  slurmctld -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF" -N $NODE
  for _ in $(seq 300); do sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break; sleep 0.1; done
  sinfo -h -o %t | grep -qE '^(idle|mix|alloc)' || { echo "node not idle" >&2; tail -20 "$D/log/slurmctld.log" "$D/log/slurmd.log" >&2; exit 1; }
  if command -v slurmrestd >/dev/null; then
    RP=$(freeport)
    # slurmrestd refuses SlurmUser (root here): it drops to nobody after
    # binding; SLURM_JWT=daemon: each request brings its own token.
    SLURM_JWT=daemon nohup slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt -s openapi/v0.0.38 -u nobody 127.0.0.1:$RP >"$D/log/slurmrestd.log" 2>&1 &
    echo $! >"$D/slurmrestd.pid"
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$RP) 2>/dev/null && break; sleep 0.1; done
    (exec 3<>/dev/tcp/127.0.0.1/$RP) 2>/dev/null || { echo "slurmrestd not listening" >&2; cat "$D/log/slurmrestd.log" >&2; exit 1; }
    echo " SLURM_RESTD_URL=http://127.0.0.1:$RP" >"$D/restd.env"
  fi
  echo "export SLURM_CONF=$SLURM_CONF$(cat "$D/restd.env" 2>/dev/null)" ;;
env) echo "export SLURM_CONF=$SLURM_CONF$(cat "$D/restd.env" 2>/dev/null)" ;;
down)
  if alive "$D/slurmctld.pid"; then
    scancel --partition=$PART 2>/dev/null || true
    for _ in $(seq 50); do squeue -h -t running,completing,suspended 2>/dev/null | grep -q . || break; sleep 0.1; done
  fi
  for f in slurmrestd slurmd slurmctld; do alive "$D/$f.pid" && kill "$(cat "$D/$f.pid")" || true; done
  for _ in $(seq 50); do alive "$D/slurmctld.pid" || alive "$D/slurmd.pid" || break; sleep 0.1; done
  find /sys/fs/cgroup/*/slurm_$NODE -depth -type d -exec rmdir {} \; 2>/dev/null || true
  rm -rf "$D"
  # munged is left running (others may use it); stop it with: kill $(cat /run/munge/munged.pid)
  ;;
*) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
