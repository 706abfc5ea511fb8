#!/usr/bin/env bash
# Every timed wait in the tree uses the monotonic clock: pthread_cond_timedwait is called
# only in core/wait.c (sl_cond_wait_until; its condition variables come from
# sl_cond_init_mono), and no source file names CLOCK_REALTIME within 10 lines of a timed
# wait. The check runs on a planted bad file first, so a checker that stopped finding
# anything fails here too. Reads the source tree only; well under a second.
set -u
SRC=${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
bad=0

# FILES... -> prints "file:line: why" for each offence; exit 1 when there is one
check() {
    awk '
        function flush(   r, w) {
            for (r in rt) for (w in tw) if (r - w <= 10 && w - r <= 10) {
                print prev ":" r ": CLOCK_REALTIME next to the timed wait at line " w; bad = 1
            }
            split("", rt); split("", tw)
        }
        FNR == 1 { if (NR > 1) flush(); prev = FILENAME }
        /CLOCK_REALTIME/ { rt[FNR] = 1 }
        /pthread_cond_timedwait|sl_cond_wait_until|sl_cond_wait_ms/ { tw[FNR] = 1 }
        /pthread_cond_timedwait/ && FILENAME !~ /core\/wait\.c$/ {
            print FILENAME ":" FNR ": pthread_cond_timedwait outside core/wait.c (use sl_cond_wait_until)"; bad = 1
        }
        END { flush(); exit bad }' "$@"
}

T=$(mktemp -d /tmp/sluice-waits-XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/pipeline"
printf 'struct timespec ts;\nclock_gettime(CLOCK_REALTIME, &ts);\nts.tv_sec++;\npthread_cond_timedwait(&cv, &mu, &ts);\n' \
    > "$T/pipeline/planted.c"
out=$(check "$T/pipeline/planted.c")
if [ $? -eq 1 ] && grep -q 'planted.c:4: pthread_cond_timedwait outside core/wait.c' <<<"$out" &&
    grep -q 'planted.c:2: CLOCK_REALTIME next to the timed wait at line 4' <<<"$out"; then
    echo "ok   the check finds a planted CLOCK_REALTIME wait"
else
    echo "FAIL the check missed the planted wait: $out"; bad=1
fi

mapfile -t files < <(cd "$SRC" && find core formats pipeline dist train tools tests python examples \
    -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cc' \) 2>/dev/null | sort)
if out=$(cd "$SRC" && check "${files[@]}"); then
    echo "ok   ${#files[@]} source files: every timed wait is monotonic"
else
    echo "FAIL $out"; bad=1
fi
exit $bad
