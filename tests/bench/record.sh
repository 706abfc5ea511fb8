#!/usr/bin/env bash
# record.sh SRC "RESULT NAME ..." [NOTE]: append one run to SRC/tests/bench/results.tsv (date
# in UTC, commit, machine, the RESULT line, the note), then regenerate the benchmark tables
# of SRC/docs/benchmarks.md and SRC/README.md from it (scripts/gen_bench_docs.py).
# tests/bench/run NAME --record calls it. The machine is what this one reports of itself:
# the CPU model, cores and memory from /proc, "AVX-512" when the CPU has avx512f, "virtual
# machine" when it runs under a hypervisor, and the GPU and driver when nvidia-smi names one.
# Exit 1 (writing nothing) when the RESULT line holds a tab or a newline, or is not one.
set -euo pipefail
src=$1
result=$2
note=${3:-}
case "$result" in
RESULT\ *) ;;
*) echo "record: not a RESULT line: $result" >&2; exit 1 ;;
esac
case "$result$note" in
*$'\t'* | *$'\n'*) echo "record: the RESULT line or note holds a tab or a newline" >&2; exit 1 ;;
esac
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
[ -n "$cpu" ] || cpu=$(uname -m)
machine="$(nproc)-core $cpu"
grep -qw avx512f /proc/cpuinfo && machine+=" (AVX-512)"
mem=$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
machine+=", $mem GiB"
grep -qw hypervisor /proc/cpuinfo && machine+=", virtual machine"
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
    [ -n "$gpu" ] && machine="${gpu%%,*} (driver ${gpu##*, }), $machine"
fi
commit=$(git -C "$src" describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$commit" "$machine" "$result" "$note" >>"$src/tests/bench/results.tsv"
echo "record: appended to tests/bench/results.tsv: $(date -u +%F) $commit $machine" >&2
python3 "$src/scripts/gen_bench_docs.py" "$src" >&2
