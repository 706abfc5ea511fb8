#!/usr/bin/env bash
# sluice-launch end to end: the environment each task gets (TF_CONFIG, SLUICE_*), output
# prefixed per task, exit status of the first failure propagated, the others stopped (no
# sleeper survives), ps tasks stopped when the workers are done, --timeout, SIGTERM
# forwarding, usage errors; and a real 3-replica ring allreduce (example_ring_allreduce)
# that resolves its cluster from TF_CONFIG.
set -u
# ZeroMQ is not built with ThreadSanitizer; in a TSan build, ignore what happens inside it
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$(cd "$(dirname "$0")" && pwd)/tsan_zmq.supp"

BIN=${SLUICE_BIN:-build/bin}
L=$BIN/sluice-launch
if [ ! -x "$L" ]; then echo "skipped: $L is not built"; exit 77; fi

T=$(mktemp -d /tmp/sluice-launch-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
# a port base of our own so parallel runs do not collide
PB=$((20000 + ($$ * 7) % 30000))

# 1. environment and prefixes
"$L" -n 2 --ps 1 --port-base $PB -- sh -c 'echo "task=$SLUICE_TASK rank=$SLUICE_RANK world=$SLUICE_WORLD ps=$SLUICE_NUM_PS"; echo "tf=$TF_CONFIG"; echo oops >&2; [ "$SLUICE_TASK" = "ps 0" ] && exec sleep 30; sleep 1; exit 0' >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 0 ] || fail "env run exited $rc"
grep -qx "\[worker 1\] task=worker 1 rank=1 world=2 ps=1" "$T/o" || fail "worker 1 line: $(cat "$T/o")"
grep -qx "\[ps 0\] task=ps 0 rank=0 world=2 ps=1" "$T/o" || fail "ps 0 line"
grep -qxF "[worker 0] tf={\"cluster\": {\"worker\": [\"127.0.0.1:$PB\", \"127.0.0.1:$((PB + 1))\"], \"ps\": [\"127.0.0.1:$((PB + 2))\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}" "$T/o" || fail "TF_CONFIG line: $(grep tf= "$T/o")"
[ "$(grep -c '^\[.*\] oops$' "$T/e")" = 3 ] || fail "stderr prefixes: $(cat "$T/e")"
[ $fails -eq 0 ] && ok "environment, prefixes, ps stopped after the workers"

# 2. a failing task: its status comes back, the sleepers are stopped quickly
MARK=6$((PB % 10)).$$  # a sleep duration no other process uses, to look for survivors
start=$(date +%s)
"$L" -n 4 --grace 2 -- sh -c 'if [ "$SLUICE_RANK" = 2 ]; then sleep 0.3; echo bye; exit 7; fi; exec sleep '$MARK >"$T/o" 2>"$T/e"
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 7 ] || fail "exit status $rc, expected 7"
[ $took -lt 10 ] || fail "took $took s to stop the others"
grep -q "sluice-launch: worker 2 exited with status 7; stopping the others" "$T/e" || fail "stderr: $(cat "$T/e")"
grep -qx "\[worker 2\] bye" "$T/o" || fail "worker 2 output"
pgrep -f "sleep $MARK" >/dev/null && fail "a sleeper survived"
[ $fails -eq 0 ] && ok "failure propagated (7) and the others stopped in ${took}s"

# 3. a task that ignores SIGTERM is killed after the grace period; killed-by-signal status
"$L" -n 2 --grace 1 -- sh -c 'if [ "$SLUICE_RANK" = 0 ]; then kill -9 $$; fi; trap "" TERM; sleep 20' >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 137 ] || fail "killed task: exit status $rc, expected 137"
grep -q "worker 0 was killed with status 137" "$T/e" || fail "stderr: $(cat "$T/e")"
[ $fails -eq 0 ] && ok "signal status (137), SIGTERM-ignoring sibling killed"

# 4. --timeout
"$L" -n 2 --timeout 1 --grace 1 -- sleep 30 >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 124 ] || fail "--timeout: exit status $rc, expected 124"
[ $fails -eq 0 ] && ok "--timeout exits 124"

# 5. SIGTERM to the launcher reaches the tasks
"$L" -n 2 --grace 2 -- sh -c 'trap "echo got-term; exit 0" TERM; sleep 30 & wait' >"$T/o" 2>"$T/e" &
lp=$!
sleep 0.5
kill -TERM $lp
wait $lp
rc=$?
[ $rc -eq 143 ] || fail "SIGTERM: exit status $rc, expected 143"
[ "$(grep -c 'got-term' "$T/o")" = 2 ] || fail "tasks did not see SIGTERM: $(cat "$T/o")"
[ $fails -eq 0 ] && ok "SIGTERM forwarded (exit 143)"

# 6. usage errors
"$L" -- true >/dev/null 2>"$T/e"; rc=$?
[ $rc -eq 2 ] || fail "missing -n: exit $rc"
grep -q "missing -n N" "$T/e" || fail "missing -n message"
"$L" -n 2 >/dev/null 2>"$T/e"; rc=$?
[ $rc -eq 2 ] || fail "missing program: exit $rc"
"$L" -n 0 -- true >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "-n 0: exit $rc"
"$L" -n 1 -- /nonexistent/prog >/dev/null 2>"$T/e"; rc=$?
[ $rc -eq 127 ] || fail "missing program: exit $rc, expected 127"
[ $fails -eq 0 ] && ok "usage errors"

# 7. a real ring: 3 replicas resolve TF_CONFIG, allreduce 1,000,003 floats exactly
EX=$BIN/example_ring_allreduce
if [ -x "$EX" ]; then
    "$L" -n 3 --port-base $((PB + 10)) -- "$EX" --count 1000003 --reps 2 >"$T/o" 2>"$T/e"
    rc=$?
    [ $rc -eq 0 ] || fail "ring run exited $rc: $(cat "$T/e")"
    for r in 0 1 2; do
        grep -q "^\[worker $r\] rank $r/3 (127.0.0.1:$((PB + 10 + r))): allreduce of 1000003 floats ok, .*broadcast \"hello from rank 2\"; dropped 0$" "$T/o" ||
            fail "rank $r line: $(cat "$T/o")"
    done
    # a replica that fails: its status is the launcher's, the others are stopped
    "$L" -n 3 --grace 2 --port-base $((PB + 20)) -- "$EX" --fail-rank 1 --timeout 30 >"$T/o" 2>"$T/e"
    rc=$?
    [ $rc -eq 3 ] || fail "failing replica: exit $rc, expected 3: $(cat "$T/e")"
    grep -q "^\[worker 1\] rank 1: failing on purpose$" "$T/e" || fail "failing replica stderr: $(cat "$T/e")"
    [ $fails -eq 0 ] && ok "3-replica ring allreduce through sluice-launch"
else
    echo "  (example_ring_allreduce not built: ring part not run)"
fi

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
