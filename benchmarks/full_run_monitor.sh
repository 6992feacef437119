#!/usr/bin/env bash
# Run one command (a full-trace `mlsched simulate`) under /usr/bin/time -v and sample, every
# INTERVAL seconds, the load average, the process's CPU seconds (user + system, from
# /proc/PID/stat) and its latest progress line: per-policy CPU time of a multi-policy run is
# the CPU counter's change between the first progress lines of consecutive policies.
#   benchmarks/full_run_monitor.sh OUTDIR -- .venv/bin/mlsched simulate --trace ... --policy ...
# OUTDIR gets stdout.txt, stderr.txt (progress and time -v), samples.tsv.
set -u
out=$1; shift; [ "$1" = "--" ] && shift
interval=${INTERVAL:-10}
mkdir -p "$out"
/usr/bin/time -v "$@" >"$out/stdout.txt" 2>"$out/stderr.txt" &
timer=$!
sleep 1
pid=$(pgrep -P "$timer" | head -n 1)
tick=$(getconf CLK_TCK)
printf 'unix_s\tload1\tload5\tload15\tcpu_s\tprogress\n' >"$out/samples.tsv"
while kill -0 "$timer" 2>/dev/null; do
    if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
        cpu=$(awk -v t="$tick" '{printf "%.1f", ($14 + $15) / t}' "/proc/$pid/stat")
    else
        cpu=""
    fi
    line=$(grep -E '^[a-z0-9-]+: [0-9]+%' "$out/stderr.txt" | tail -n 1)
    read -r l1 l5 l15 _ </proc/loadavg
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date +%s)" "$l1" "$l5" "$l15" "$cpu" "$line" >>"$out/samples.tsv"
    sleep "$interval"
done
wait "$timer"
