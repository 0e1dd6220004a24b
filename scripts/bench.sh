#!/usr/bin/env bash
# Runs computeboard's benchmarks and prints each figure next to its
# same-run baseline. Raw `go test -bench` output is kept under .run/bench/.
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

run blackboard ./blackboard 'Post|Query|Baseline' 2s
run broker     ./broker     'Intake|Accept|Baseline' 20000x
run engine     ./engine     'Schedule' 3x

# metric FILE NAME-REGEX UNIT: the value of UNIT on the first matching line.
metric() {
  awk -v re="$2" -v unit="$3" '$1 ~ re { for (i = 3; i < NF; i++) if ($(i+1) == unit) { print $i; exit } }' "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / b; else print "n/a" }'; }

echo
echo "== Summary (same run; ratios against the baseline measured next to it)"
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
for consumer in batch next; do
  for load in max-pipelined max; do
    for c in 1 10 1000; do
      l="^BenchmarkIntake/consumer=$consumer/load=$load/clients=$c(-|\$)"
      printf 'broker intake %-5s %-13s %4s clients: %8s req/s = %5s%% of pipelined XADD (%s%% of its posters); CPU/req %s µs Go + %s µs Redis (pipelined XADD: %s + %s)\n' \
        "$consumer" "$load" "$c" "$(metric "$br" "$l" 'req/s')" "$(metric "$br" "$l" 'pct_of_xadd')" "$(metric "$br" "$l" 'pct_of_post')" \
        "$(metric "$br" "$l" 'go-µs/req')" "$(metric "$br" "$l" 'redis-µs/req')" "$(metric "$br" "$l" 'xadd-go-µs/req')" "$(metric "$br" "$l" 'xadd-redis-µs/req')"
    done
  done
done
grep -E '^BenchmarkIntake/.*rps' "$br" | awk '{ for (i = 3; i < NF; i++) if ($(i+1) ~ /p(50|99)-µs/) s = s " " $(i+1) " " $i; print "broker paced  " $1 ":" s; s = "" }' || true

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
