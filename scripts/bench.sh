#!/usr/bin/env bash
# Runs computeboard's benchmarks and prints each figure next to its
# same-run baseline. Raw `go test -bench` output is kept under .run/bench/.
# The durable-intake part (post→durable job against asynq's enqueue→handler)
# starts its own redis-server on a unix socket and stops it on exit.
# BENCH_ONLY=durable runs only that part; INTAKE_N (default 10000) and
# PACED_N (default 5000) bound its request counts. BENCH_ONLY=pool runs only
# the pool scheduler (cmd/poolbench: POOL_NODES fake nodes, default 1000;
# POOL_N jobs, default 20000; POOL_RATE jobs/s for the latency part).
# BENCH_ONLY=e2e runs only the end-to-end part (cmd/e2ebench: a real
# adapter, built with its supervisor into .run/bench/bin, running real
# processes on this machine, on its own redis-server): trivial jobs/s
# against fork/exec of /bin/true (E2E_N, default 2000), post→started and
# exit→succeeded latency one job at a time against a bare fork/exec of the
# same program (E2E_LATENCY_N, default 200), and Redis bytes, adapter RSS
# and CPU with E2E_PENDING (default 10000) unplaceable pending jobs against
# asynq's pending tasks and an idle adapter (CPU sampled over E2E_SECS,
# default 10; memory read once every pending job has its first
# explanation, about 3.5 minutes for 10,000); then the local provider
# alone (go test ./providers/local -bench StartToExit: E2E_N trivial tasks
# through its supervisor server,
# with a cgroup per task and without, against /bin/true run straight), the
# floor of the end-to-end figure.
# BENCH_ONLY=slurm runs only the Slurm provider part (cmd/providerbench: a
# real single-node Slurm with slurmrestd, started for the run; needs root
# and the Slurm packages): SLURM_N (default 200) trivial jobs (on a node of 256 slots: all can start at once) submitted by
# `sbatch` in a loop against the same jobs posted through the blackboard
# to an adapter whose provider is that partition, over each transport (cli,
# rest), started/s and the overhead per job; and submit→job started one
# job at a time (SLURM_LATENCY_N, default 30), sbatch against post.
# BENCH_ONLY=kube runs only the Kubernetes provider part (cmd/kubebench: a
# real control plane with kwok's fake nodes, from scripts/k8s-build.sh):
# KUBE_N (default 200) Jobs created through client-go in a loop against the
# same jobs posted through the blackboard to an adapter whose provider is
# that cluster, Pods Running/s and the overhead per job; and submit→Pod
# Running one job at a time (KUBE_LATENCY_N, default 30), the two sides
# alternating job by job.
# These machines are noisy: read ratios, not absolute numbers, and run it
# twice before believing a change.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.run/bench
mkdir -p "$out"
GO=${GO:-go}

run() { # name, package, pattern, benchtime
  echo "== $1: go test $2 -bench '$3' -benchtime $4" >&2
  $GO test "$2" -run '^$' -bench "$3" -benchtime "$4" -count 1 -timeout 30m | tee "$out/$1.txt" >&2
}

# metric FILE NAME-REGEX UNIT: the value of UNIT on the first matching line.
metric() {
  awk -v re="$2" -v unit="$3" '$1 ~ re { for (i = 3; i < NF; i++) if ($(i+1) == unit) { print $i; exit } }' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / b; else print "n/a" }'; }

durable() { # post→durable job (cmd/cbbench) against asynq (bench/peers/asynq), same Redis, same run
  local bin=$PWD/$out/bin
  mkdir -p "$bin"
  echo "== durable intake: building cmd/cbbench and bench/peers/asynq" >&2
  $GO build -o "$bin/cbbench" ./cmd/cbbench
  (cd bench/peers/asynq && $GO build -o "$bin/asynq-peer" .)
  command -v redis-server >/dev/null || { echo "redis-server not found: install it with \`sudo apt-get install -y redis-server\`" >&2; return 1; }
  # Globals, so that the EXIT trap still sees them.
  redis_dir=$(mktemp -d)
  redis-server --port 0 --unixsocket "$redis_dir/r.sock" --save "" --appendonly no >"$redis_dir/redis.log" 2>&1 &
  redis_pid=$!
  trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$redis_dir"' EXIT
  for _ in $(seq 100); do [ -S "$redis_dir/r.sock" ] && break; sleep 0.05; done
  local r=(-network unix -redis "$redis_dir/r.sock") f=$out/durable.txt
  : >"$f"
  for c in 1 10 100; do # interleaved, so both sides see the same machine
    "$bin/cbbench"    "${r[@]}" -clients "$c" -n "$INTAKE_N" | tee -a "$f" >&2
    "$bin/asynq-peer" "${r[@]}" -clients "$c" -n "$INTAKE_N" | tee -a "$f" >&2
  done
  "$bin/cbbench"    "${r[@]}" -clients 10 -n "$INTAKE_N" -post-only | tee -a "$f" >&2
  "$bin/cbbench"    "${r[@]}" -clients 10 -n "$PACED_N" -rate 1000 | tee -a "$f" >&2
  "$bin/asynq-peer" "${r[@]}" -clients 10 -n "$PACED_N" -rate 1000 | tee -a "$f" >&2
  kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true
  rm -rf "$redis_dir"
  trap - EXIT
}

poolrun() { # the scheduler with fake nodes through real Redis (cmd/poolbench), next to the bare Redis work
  local bin=$PWD/$out/bin
  mkdir -p "$bin"
  echo "== pool: building cmd/poolbench" >&2
  $GO build -o "$bin/poolbench" ./cmd/poolbench
  pool_dir=$(mktemp -d)
  redis-server --port 0 --unixsocket "$pool_dir/r.sock" --save "" --appendonly no >"$pool_dir/redis.log" 2>&1 &
  pool_pid=$!
  trap 'kill "$pool_pid" 2>/dev/null; wait "$pool_pid" 2>/dev/null; rm -rf "$pool_dir"' EXIT
  for _ in $(seq 100); do [ -S "$pool_dir/r.sock" ] && break; sleep 0.05; done
  "$bin/poolbench" -network unix -redis "$pool_dir/r.sock" -nodes "$POOL_NODES" -n "$POOL_N" -rate "$POOL_RATE" -secs 5 | tee "$out/pool.txt" >&2
  kill "$pool_pid"; wait "$pool_pid" 2>/dev/null || true
  rm -rf "$pool_dir"
  trap - EXIT
}

e2erun() { # a real adapter end to end (cmd/e2ebench), next to fork/exec and asynq's pending tasks on the same Redis
  local bin=$PWD/$out/bin
  mkdir -p "$bin"
  echo "== e2e: building cmd/adapter (with cmd/cb-supervisor where it exists), cmd/e2ebench and bench/peers/asynq" >&2
  $GO build -o "$bin/adapter" ./cmd/adapter
  rm -f "$bin/cb-supervisor" # the adapter runs tasks under one next to it: never a stale one
  if [ -d cmd/cb-supervisor ]; then $GO build -o "$bin/cb-supervisor" ./cmd/cb-supervisor; fi
  $GO build -o "$bin/e2ebench" ./cmd/e2ebench
  (cd bench/peers/asynq && $GO build -o "$bin/asynq-peer" .)
  command -v redis-server >/dev/null || { echo "redis-server not found: install it with \`sudo apt-get install -y redis-server\`" >&2; return 1; }
  e2e_dir=$(mktemp -d)
  redis-server --port 0 --unixsocket "$e2e_dir/r.sock" --save "" --appendonly no >"$e2e_dir/redis.log" 2>&1 &
  e2e_pid=$!
  trap 'kill "$e2e_pid" 2>/dev/null; wait "$e2e_pid" 2>/dev/null; rm -rf "$e2e_dir"' EXIT
  for _ in $(seq 100); do [ -S "$e2e_dir/r.sock" ] && break; sleep 0.05; done
  local r=(-network unix -redis "$e2e_dir/r.sock")
  "$bin/e2ebench" "${r[@]}" -adapter "$bin/adapter" -n "$E2E_N" -latency-n "$E2E_LATENCY_N" -pending "$E2E_PENDING" -secs "$E2E_SECS" | tee "$out/e2e.txt" >&2
  "$bin/asynq-peer" "${r[@]}" -pending -clients 4 -n "$E2E_PENDING" | tee -a "$out/e2e.txt" >&2
  kill "$e2e_pid"; wait "$e2e_pid" 2>/dev/null || true
  rm -rf "$e2e_dir"
  trap - EXIT
  # The local provider alone (no Redis, no scheduler, no agent): its floor
  # for the figure above, next to /bin/true run straight, same run.
  run provider ./providers/local 'StartToExit/^(bin-true|cb-supervisor-server|cb-supervisor-server-unconfined)$' "${E2E_N}x"
}

slurmrun() { # computeboard over Slurm (cmd/providerbench) next to sbatch in a loop, same cluster, same run
  local bin=$PWD/$out/bin
  mkdir -p "$bin"
  if [ "$(id -u)" -ne 0 ] || ! { [ -x /usr/sbin/slurmctld ] || command -v slurmctld >/dev/null; }; then
    echo "slurm: not measured: needs root and Slurm (apt-get install -y munge slurmctld slurmd slurm-client slurmrestd)" | tee "$out/slurm.txt" >&2
    return 0
  fi
  echo "== slurm: building cmd/adapter and cmd/providerbench" >&2
  $GO build -o "$bin/adapter" ./cmd/adapter
  $GO build -o "$bin/providerbench" ./cmd/providerbench
  slurm_dir=$(mktemp -d)
  redis-server --port 0 --unixsocket "$slurm_dir/r.sock" --save "" --appendonly no >"$slurm_dir/redis.log" 2>&1 &
  slurm_pid=$!
  trap 'kill "$slurm_pid" 2>/dev/null; wait "$slurm_pid" 2>/dev/null; rm -rf "$slurm_dir"' EXIT
  for _ in $(seq 100); do [ -S "$slurm_dir/r.sock" ] && break; sleep 0.05; done
  "$bin/providerbench" -network unix -redis "$slurm_dir/r.sock" -adapter "$bin/adapter" -n "$SLURM_N" -latency-n "$SLURM_LATENCY_N" | tee "$out/slurm.txt" >&2
  kill "$slurm_pid"; wait "$slurm_pid" 2>/dev/null || true
  rm -rf "$slurm_dir"
  trap - EXIT
}
SLURM_N=${SLURM_N:-200}
SLURM_LATENCY_N=${SLURM_LATENCY_N:-30}
# skv SIDE PART KEY [TRANSPORT]: the value of KEY on slurm.txt's line for that side, part (and transport).
skv() {
  awk -v side="side=$1" -v part="part=$2" -v key="$3" -v tr="transport=${4:-}" '
    { s = p = t = 0; for (i = 1; i <= NF; i++) { if ($i == side) s = 1; if ($i == part) p = 1; if ($i == tr || tr == "transport=") t = 1 } }
    s && p && t { for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit } }' "$out/slurm.txt"
}
slurm_summary() {
  if ! grep -q '^side=' "$out/slurm.txt" 2>/dev/null; then cat "$out/slurm.txt"; return 0; fi
  echo "slurm: a real single-node Slurm ($(skv sbatch throughput slots) slots), trivial jobs as nobody; sbatch in a loop against posts through the blackboard to an adapter over it:"
  printf 'slurm sbatch loop: %s submits/s; %s jobs started/s (%s jobs); submit→started one at a time p50 %s ms, p99 %s ms\n' \
    "$(skv sbatch throughput submit_per_s)" "$(skv sbatch throughput started_per_s)" "$(skv sbatch throughput n)" \
    "$(skv sbatch latency submit_to_started_p50_ms)" "$(skv sbatch latency submit_to_started_p99_ms)"
  for tr in cli rest; do
    grep -q "transport=$tr" "$out/slurm.txt" || continue
    printf 'slurm computeboard over %-4s: %s jobs started/s = x%s sbatch'"'"'s (overhead %s ms per job = %s%% of sbatch'"'"'s; aim < 20%%); post→started p50 %s ms, p99 %s ms (overhead p50 %s ms, x%s)\n' \
      "$tr" "$(skv computeboard throughput started_per_s $tr)" "$(skv computeboard throughput ratio $tr)" "$(skv computeboard throughput overhead_ms_per_job $tr)" "$(skv computeboard throughput overhead_pct $tr)" \
      "$(skv computeboard latency post_to_started_p50_ms $tr)" "$(skv computeboard latency post_to_started_p99_ms $tr)" \
      "$(skv computeboard latency overhead_p50_ms $tr)" "$(skv computeboard latency ratio_p50 $tr)"
  done
}
kuberun() { # computeboard over Kubernetes (cmd/kubebench) next to Jobs created through client-go, same control plane, same run
  local bin=$PWD/$out/bin
  mkdir -p "$bin"
  if ! scripts/k8s-build.sh >/dev/null; then
    echo "kube: not measured: the control plane did not build (scripts/k8s-build.sh)" | tee "$out/kube.txt" >&2
    return 0
  fi
  echo "== kube: building cmd/adapter and cmd/kubebench" >&2
  $GO build -o "$bin/adapter" ./cmd/adapter
  $GO build -o "$bin/kubebench" ./cmd/kubebench
  kube_dir=$(mktemp -d)
  redis-server --port 0 --unixsocket "$kube_dir/r.sock" --save "" --appendonly no >"$kube_dir/redis.log" 2>&1 &
  kube_pid=$!
  trap 'kill "$kube_pid" 2>/dev/null; wait "$kube_pid" 2>/dev/null; rm -rf "$kube_dir"' EXIT
  for _ in $(seq 100); do [ -S "$kube_dir/r.sock" ] && break; sleep 0.05; done
  "$bin/kubebench" -network unix -redis "$kube_dir/r.sock" -adapter "$bin/adapter" -n "$KUBE_N" -latency-n "$KUBE_LATENCY_N" | tee "$out/kube.txt" >&2
  kill "$kube_pid"; wait "$kube_pid" 2>/dev/null || true
  rm -rf "$kube_dir"
  trap - EXIT
}
KUBE_N=${KUBE_N:-200}
KUBE_LATENCY_N=${KUBE_LATENCY_N:-30}
# kkv SIDE PART KEY: the value of KEY on kube.txt's line for that side and part.
kkv() {
  awk -v side="side=$1" -v part="part=$2" -v key="$3" '
    { s = p = 0; for (i = 1; i <= NF; i++) { if ($i == side) s = 1; if ($i == part) p = 1 } }
    s && p { for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit } }' "$out/kube.txt"
}
kube_summary() {
  if ! grep -q '^side=' "$out/kube.txt" 2>/dev/null; then cat "$out/kube.txt" 2>/dev/null || true; return 0; fi
  echo "kube: a real control plane ($(kkv direct throughput nodes) kwok nodes), Pods that run until deleted; Jobs created through client-go in a loop against posts through the blackboard to an adapter over it:"
  printf 'kube client-go loop: %s creates/s; %s Pods Running/s (%s jobs); create→Running one at a time p50 %s ms, p99 %s ms\n' \
    "$(kkv direct throughput create_per_s)" "$(kkv direct throughput started_per_s)" "$(kkv direct throughput n)" \
    "$(kkv direct latency create_to_started_p50_ms)" "$(kkv direct latency create_to_started_p99_ms)"
  printf 'kube computeboard: %s Pods Running/s = x%s client-go'"'"'s (overhead %s ms per job = %s%% of client-go'"'"'s; aim < 20%%); post→Running p50 %s ms, p99 %s ms (overhead p50 %s ms, x%s)\n' \
    "$(kkv computeboard throughput started_per_s)" "$(kkv computeboard throughput ratio)" "$(kkv computeboard throughput overhead_ms_per_job)" "$(kkv computeboard throughput overhead_pct)" \
    "$(kkv computeboard latency post_to_started_p50_ms)" "$(kkv computeboard latency post_to_started_p99_ms)" \
    "$(kkv computeboard latency overhead_p50_ms)" "$(kkv computeboard latency ratio_p50)"
  printf 'kube latency p50 splits: post→accepted %s ms, accepted→running (the agent'"'"'s compare-and-set, before the Create) %s ms, running→Pod seen %s ms (client-go create→Pod seen %s ms), Pod seen→Running %s ms (client-go %s ms)\n' \
    "$(kkv computeboard latency post_to_accepted_p50_ms)" "$(kkv computeboard latency accepted_to_running_p50_ms)" "$(kkv computeboard latency running_to_pod_p50_ms)" \
    "$(kkv direct latency create_to_pod_p50_ms)" "$(kkv computeboard latency pod_to_running_p50_ms)" "$(kkv direct latency pod_to_running_p50_ms)"
}
if [ "${BENCH_ONLY:-}" = kube ]; then
  kuberun
  echo
  echo "== Summary (same run; each figure next to the baseline measured with it)"
  kube_summary
  exit 0
fi
if [ "${BENCH_ONLY:-}" = slurm ]; then
  slurmrun
  echo
  echo "== Summary (same run; each figure next to the baseline measured with it)"
  slurm_summary
  exit 0
fi

E2E_N=${E2E_N:-2000}
E2E_LATENCY_N=${E2E_LATENCY_N:-200}
E2E_PENDING=${E2E_PENDING:-10000}
E2E_SECS=${E2E_SECS:-10}
# ekv SIDE PART KEY: the value of KEY on e2e.txt's line for that side and
# part (part=PART, or path=PART on the asynq peer's line).
ekv() {
  awk -v side="side=$1" -v part="part=$2" -v path="path=$2" -v key="$3" '
    { s = p = 0; for (i = 1; i <= NF; i++) { if ($i == side) s = 1; if ($i == part || $i == path) p = 1 } }
    s && p { for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit } }' "$out/e2e.txt"
}
ms() { awk -v u="$1" 'BEGIN { if (u != "") printf "%.1f", u / 1000; else print "n/a" }'; }
e2e_summary() {
  local c=computeboard
  echo "e2e: a real adapter (adapter serve, its own board) running real processes on this machine through its local provider:"
  printf 'e2e trivial jobs (/bin/true) %7s jobs/s, %s at a time (post to every job succeeded)   fork/exec of /bin/true, %s at a time: %7s/s   = %s of it (goal ≥ 30%%)\n' \
    "$(ekv $c throughput jobs_per_s)" "$(ekv $c throughput concurrency)" "$(ekv $c throughput concurrency)" "$(ekv $c throughput forkexec_per_s)" \
    "$(awk -v r="$(ekv $c throughput ratio)" 'BEGIN { if (r != "") printf "%.1f%%", 100 * r; else print "n/a" }')"
  printf 'e2e CPU per trivial job: adapter %s ms + its children (supervisors, jobs) %s ms + Redis %s ms   fork/exec of /bin/true: %s ms per exec; the adapter allocated %s KB per job (%s collections over the run)\n' \
    "$(ekv $c throughput adapter_cpu_ms_per_job)" "$(ekv $c throughput children_cpu_ms_per_job)" "$(ekv $c throughput redis_cpu_ms_per_job)" \
    "$(ekv $c throughput forkexec_children_cpu_ms_per_exec)" "$(ekv $c throughput adapter_alloc_kb_per_job)" "$(ekv $c throughput adapter_gcs)"
  printf 'e2e the node'"'"'s %s slots during that run: %s of their time held a job recorded running (p50 %s ms from the agent'"'"'s start to the recorded end); p50 %s ms from an end recorded to the start that refills its slot\n' \
    "$(ekv $c throughput_slots concurrency)" "$(awk -v r="$(ekv $c throughput_slots busy_share)" 'BEGIN { if (r != "") printf "%.0f%%", 100 * r; else print "n/a" }')" \
    "$(ms "$(ekv $c throughput_slots running_p50_us)")" "$(ms "$(ekv $c throughput_slots refill_p50_us)")"
  printf 'e2e latency, one job at a time (%s jobs): post→process started p50 %s ms, p99 %s ms (fork/exec→started of the same program: p50 %s ms, p99 %s ms); process exit→succeeded seen p50 %s ms, p99 %s ms\n' \
    "$(ekv $c latency n)" "$(ms "$(ekv $c latency post_to_started_p50_us)")" "$(ms "$(ekv $c latency post_to_started_p99_us)")" \
    "$(ms "$(ekv forkexec latency exec_to_started_p50_us)")" "$(ms "$(ekv forkexec latency exec_to_started_p99_us)")" \
    "$(ms "$(ekv $c latency exit_to_succeeded_p50_us)")" "$(ms "$(ekv $c latency exit_to_succeeded_p99_us)")"
  printf 'e2e latency p50 splits: post→accepted %s ms, accepted→running %s ms, running→process started %s ms; exit→recorded %s ms, recorded→seen %s ms\n' \
    "$(ms "$(ekv $c latency post_to_accepted_p50_us)")" "$(ms "$(ekv $c latency accepted_to_running_p50_us)")" "$(ms "$(ekv $c latency running_to_started_p50_us)")" \
    "$(ms "$(ekv $c latency exit_to_recorded_p50_us)")" "$(ms "$(ekv $c latency recorded_to_observed_p50_us)")"
  printf 'e2e latency p99 splits: post→accepted %s ms, accepted→running %s ms, running→process started %s ms; exit→recorded %s ms, recorded→seen %s ms\n' \
    "$(ms "$(ekv $c latency post_to_accepted_p99_us)")" "$(ms "$(ekv $c latency accepted_to_running_p99_us)")" "$(ms "$(ekv $c latency running_to_started_p99_us)")" \
    "$(ms "$(ekv $c latency exit_to_recorded_p99_us)")" "$(ms "$(ekv $c latency recorded_to_observed_p99_us)")"
  local rb aq
  rb=$(ekv $c pending redis_bytes_per_job); aq=$(ekv asynq pending redis_bytes_per_task)
  printf 'e2e %s unplaceable pending jobs, per job, read once %s of them had their first explanation (%s s after the CPU sample): Redis %s B = %s asynq'"'"'s %s B per pending task (same Redis); adapter RSS %s B (%s–%s B over the CPU sample), Go heap %s B (goal ≤ 2048 B each)\n' \
    "$(ekv $c pending pending)" "$(ekv $c pending explained)" "$(ekv $c pending explain_wait_s)" "$rb" "$(times "$rb" "$aq")" "$aq" "$(ekv $c pending rss_bytes_per_job)" \
    "$(ekv $c pending rss_min_bytes_per_job)" "$(ekv $c pending rss_max_bytes_per_job)" "$(ekv $c pending heap_bytes_per_job)"
  local fl
  fl=$(ekv $c pending-floor request_bytes_per_job)
  printf 'e2e of those Redis bytes, the poster'"'"'s own request entry (its HASH and index members, posted alone to a board no adapter reads, same run): %s B per request; computeboard'"'"'s own (record, job entry and their indexes and events): %s B\n' \
    "$fl" "$(awk -v a="$rb" -v b="$fl" 'BEGIN { if (a != "" && b != "") printf "%.0f", a - b; else print "n/a" }')"
  printf 'e2e adapter CPU with %s unplaceable pending jobs: %s%% of a core over %s s   idle adapter (0 pending, same run): %s%% (goal < 5%%)\n' \
    "$(ekv $c pending pending)" "$(ekv $c pending cpu_pct)" "$(ekv $c pending secs)" "$(ekv $c idle cpu_pct)"
  printf 'e2e Redis bytes per pending job by key:%s\n' "$(grep -E '^side=computeboard part=pending-redis ' "$out/e2e.txt" | sed 's/.*bytes_per_job_by_key://')"
  local pv=$out/provider.txt t s u
  t=$(metric "$pv" '^BenchmarkStartToExit/bin-true(-|$)' 'ns/op')
  s=$(metric "$pv" '^BenchmarkStartToExit/cb-supervisor-server(-[0-9]+)?$' 'ns/op')
  u=$(metric "$pv" '^BenchmarkStartToExit/cb-supervisor-server-unconfined(-|$)' 'ns/op')
  printf 'e2e the local provider alone, trivial tasks 8 at a time through its supervisor server (no Redis, scheduler or agent): %s tasks/s with a cgroup per task = %s of /bin/true run straight (%s/s), %s tasks/s unconfined = %s; supervisor and task CPU %s µs per task (/bin/true: %s µs)\n' \
    "$(persec "$s")" "$(ratio "$t" "$s")" "$(persec "$t")" "$(persec "$u")" "$(ratio "$t" "$u")" \
    "$(metric "$pv" '^BenchmarkStartToExit/cb-supervisor-server(-[0-9]+)?$' 'child-cpu-us/op')" "$(metric "$pv" '^BenchmarkStartToExit/bin-true(-|$)' 'child-cpu-us/op')"
}
# persec NS: a rate per second from nanoseconds per op.
persec() { awk -v ns="$1" 'BEGIN { if (ns > 0) printf "%.0f", 1e9 / ns; else print "n/a" }'; }

# kv FILE SIDE CLIENTS RATE KEY: the value of KEY on durable.txt's line for that side and load
# (not the post-only line).
kv() {
  awk -v side="side=$2" -v cl="clients=$3" -v rate="rate=$4" -v key="$5" '
    { s = c = r = po = 0; for (i = 1; i <= NF; i++) { if ($i == side) s = 1; if ($i == cl) c = 1; if ($i == rate) r = 1; if ($i == "path=post-only") po = 1 } }
    s && c && r && !po { for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit } }' "$1"
}
times() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "x%.2f", a / b; else print "n/a" }'; }

INTAKE_N=${INTAKE_N:-10000}
PACED_N=${PACED_N:-5000}
POOL_NODES=${POOL_NODES:-1000}
POOL_N=${POOL_N:-20000}
POOL_RATE=${POOL_RATE:-2000}
# pkv KEY PART: the value of KEY on pool.txt's line for that part.
pkv() { awk -v part="part=$2" -v key="$1" '{ p = 0; for (i = 1; i <= NF; i++) if ($i == part) p = 1 } p { for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit } }' "$out/pool.txt"; }
pool_summary() {
  echo "pool: the scheduler placing $POOL_N queued jobs on $POOL_NODES fake nodes through real Redis (assignment written, agent's compare-and-set, handle, report and ack):"
  printf 'pool scheduler  %7s assignments/s   bare Redis (XADD, XREADGROUP, XACK) %7s/s = x%s of it; accepted→running at %s jobs/s: p50 %s ms, p99 %s ms\n' \
    "$(pkv assignments_per_s throughput)" "$(pkv assignments_per_s baseline)" "$(pkv ratio_to_baseline throughput)" "$POOL_RATE" "$(pkv p50_ms latency)" "$(pkv p99_ms latency)"
}
if [ "${BENCH_ONLY:-}" = pool ]; then
  poolrun
  echo
  pool_summary
  exit 0
fi
if [ "${BENCH_ONLY:-}" = e2e ]; then
  e2erun
  echo
  echo "== Summary (same run; each figure next to the baseline measured with it)"
  e2e_summary
  exit 0
fi
if [ "${BENCH_ONLY:-}" != durable ]; then
  run blackboard ./blackboard 'Post|Query|Baseline' 2s
  run broker     ./broker     'Intake|Accept|Baseline' 20000x
  run engine     ./engine     'Schedule' 3x
  poolrun
  e2erun
  slurmrun
  kuberun
fi
durable


echo
echo "== Summary (same run; ratios against the baseline measured next to it)"
du=$out/durable.txt
echo "post→durable job (Store.Post → record, job entry, consume, ack; NextBatch+AcceptBatch as the adapter's intake)"
echo "against asynq enqueue→handler on the same Redis; $INTAKE_N requests per point:"
for c in 1 10 100; do
  cb=$(kv "$du" computeboard "$c" 0 req_per_s)
  aq=$(kv "$du" asynq "$c" 0 tasks_per_s)
  printf 'durable intake %4s clients: computeboard %7s req/s   asynq %7s tasks/s   = %s asynq\n' "$c" "$cb" "$aq" "$(times "$cb" "$aq")"
done
# The Redis budget at 10 clients: what the whole path, the post alone
# (-post-only, the contract's write before computeboard does anything) and
# asynq each cost the one Redis, and what 1.5x asynq's rate would leave per
# request on one fully busy Redis core (1 s / rate).
post_only() { awk -v key="$1" '/side=computeboard path=post-only / { for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) { print substr($i, length(key) + 2); exit } }' "$du"; }
aq10=$(kv "$du" asynq 10 0 tasks_per_s)
printf 'Redis CPU per request, 10 clients: computeboard post→durable job %s µs, of which the poster'"'"'s Store.Post alone (no intake, same Redis) %s µs; asynq enqueue→handler %s µs per task. At 1.5x asynq'"'"'s rate (%s/s) one Redis core has at most %s µs per request in all\n' \
  "$(kv "$du" computeboard 10 0 redis_cpu_us_per_req)" "$(post_only redis_cpu_us_per_req)" "$(kv "$du" asynq 10 0 redis_cpu_us_per_task)" \
  "$(awk -v r="$aq10" 'BEGIN { printf "%.0f", 1.5 * r }')" "$(awk -v r="$aq10" 'BEGIN { if (r > 0) printf "%.0f", 1e6 / (1.5 * r); else print "n/a" }')"
printf 'post→accepted at a paced 1,000 req/s, 10 clients, %s requests: p50 %s µs, p99 %s µs (asynq enqueue→handler at the same load: p50 %s µs, p99 %s µs)\n' \
  "$PACED_N" "$(kv "$du" computeboard 10 1000 p50_us)" "$(kv "$du" computeboard 10 1000 p99_us)" \
  "$(kv "$du" asynq 10 1000 p50_us)" "$(kv "$du" asynq 10 1000 p99_us)"
[ "${BENCH_ONLY:-}" = durable ] && exit 0
pool_summary
e2e_summary
slurm_summary
kube_summary

bb=$out/blackboard.txt
xadd=$(metric "$bb" '^BenchmarkBaselineXADD' 'ops/s')
hset=$(metric "$bb" '^BenchmarkBaselineHSET' 'ops/s')
post=$(metric "$bb" '^BenchmarkPost' 'ops/s')
query=$(metric "$bb" '^BenchmarkQuery' 'ops/s')
printf 'blackboard post   %10s ops/s  = %s of plain XADD (%s ops/s), %s of plain HSET (%s ops/s)\n' \
  "$post" "$(ratio "$post" "$xadd")" "$xadd" "$(ratio "$post" "$hset")" "$hset"
printf 'blackboard query  %10s ops/s  (topic query, limit 50, 10k entries)\n' "$query"

br=$out/broker.txt
base=$(metric "$br" '^BenchmarkBaselinePipelinedXADD/clients=10(-|$)' 'req/s')
printf 'broker pipelined XADD alone, 10 clients: %s req/s (the ceiling; each intake line below has its own same-run figure)\n' "$base"
# BenchmarkIntake/consumer=<next|batch>/load=<max|max-pipelined|1000rps>/clients=<n>:
# intake to the adapter's hand-off (NextBatch for consumer=batch), as
# pct_of_xadd of pipelined XADD measured just before it on the same server.
# It stops at the in-memory hand-off: no job record, job entry, consume or
# ack (the durable path is the "durable intake" lines above).
for consumer in batch next; do
  for load in max-pipelined max; do
    for c in 1 10 1000; do
      l="^BenchmarkIntake/consumer=$consumer/load=$load/clients=$c(-|\$)"
      # pct_of_post divides by one-XADD-per-request posting: the posters'
      # ceiling for load=max only (pipelined posters are faster than it).
      posters="$(metric "$br" "$l" 'pct_of_post')% of one-XADD posters"
      [ "$load" = max ] || posters="posters pipelined"
      printf 'broker hand-off (in memory, not durable) %-5s %-13s %4s clients: %8s req/s = %5s%% of pipelined XADD (%s); CPU/req %s µs Go + %s µs Redis (pipelined XADD: %s + %s)\n' \
        "$consumer" "$load" "$c" "$(metric "$br" "$l" 'req/s')" "$(metric "$br" "$l" 'pct_of_xadd')" "$posters" \
        "$(metric "$br" "$l" 'go-µs/req')" "$(metric "$br" "$l" 'redis-µs/req')" "$(metric "$br" "$l" 'xadd-go-µs/req')" "$(metric "$br" "$l" 'xadd-redis-µs/req')"
    done
  done
done
# BenchmarkAccept: XADD (not Store.Post; entries pre-posted) to a durable job, 10 clients.
for consumer in batch next; do
  l="^BenchmarkAccept/consumer=$consumer/load=max/clients=10(-|\$)"
  p="^BenchmarkAccept/consumer=$consumer/load=1000rps/clients=10(-|\$)"
  printf 'broker accept (durable; XADD-posted, entries pre-posted) %-5s 10 clients: %8s req/s; at 1,000 req/s p50 %s µs, p99 %s µs\n' \
    "$consumer" "$(metric "$br" "$l" 'req/s')" "$(metric "$br" "$p" 'p50-µs')" "$(metric "$br" "$p" 'p99-µs')"
done
grep -E '^BenchmarkIntake/.*rps' "$br" | awk '{ for (i = 3; i < NF; i++) if ($(i+1) ~ /p(50|99)-µs/) s = s " " $(i+1) " " $i; print "broker paced hand-off (in memory)  " $1 ":" s; s = "" }' || true

en=$out/engine.txt
for p in 1000 10000 100000; do
  for n in 100 1000 10000; do
    l="^BenchmarkSchedule/pending=$p/nodes=$n(-|\$)"
    printf 'engine %6s pending / %5s nodes: %9s decisions/s, %9s placements/s, %7s ns/decision, %7s B/pending\n' \
      "$p" "$n" "$(metric "$en" "$l" 'decisions/s')" "$(metric "$en" "$l" 'placements/s')" \
      "$(metric "$en" "$l" 'ns/decision')" "$(metric "$en" "$l" 'B/pending')"
  done
done
small=$(metric "$en" '^BenchmarkSchedule/pending=1000/nodes=10000(-|$)' 'ns/decision')
big=$(metric "$en" '^BenchmarkSchedule/pending=100000/nodes=10000(-|$)' 'ns/decision')
awk -v a="$small" -v b="$big" 'BEGIN { if (a > 0) printf "engine cost per decision, 100k vs 1k pending on 10k nodes: x%.2f (log2 ratio of sizes would be x%.2f)\n", b / a, log(100000) / log(1000) }'
