#!/usr/bin/env bash
# sluice-launch end to end: the environment each task gets (TF_CONFIG, SLUICE_*), output
# prefixed per task, exit status of the first failure propagated, the others stopped (no
# sleeper survives), ps tasks stopped when the workers are done, --timeout, SIGTERM
# forwarding, usage errors; ps jobs (a failed non-chief worker is let go, the chief or a
# ps failing stops all, ps tasks that return by themselves), --restarts, --keygen; and a
# real 3-replica ring allreduce (example_ring_allreduce) that resolves its cluster from
# TF_CONFIG.
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
PB=$((24005 + ($$ % 40) * 100)) # blocks 24000..27999, offsets 5..27: see the port plan in lib.sh

# 1. environment and prefixes
"$L" -n 2 --ps 1 --port-base $PB -- sh -c 'echo "task=$SLUICE_TASK rank=$SLUICE_RANK world=$SLUICE_WORLD ps=$SLUICE_NUM_PS"; echo "tf=$TF_CONFIG"; echo "job=$SLUICE_JOB_ID"; echo oops >&2; [ "$SLUICE_TASK" = "ps 0" ] && exec sleep 30; sleep 1; exit 0' >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 0 ] || fail "env run exited $rc"
grep -qx "\[worker 1\] task=worker 1 rank=1 world=2 ps=1" "$T/o" || fail "worker 1 line: $(cat "$T/o")"
grep -qx "\[ps 0\] task=ps 0 rank=0 world=2 ps=1" "$T/o" || fail "ps 0 line"
grep -qxF "[worker 0] tf={\"cluster\": {\"worker\": [\"127.0.0.1:$PB\", \"127.0.0.1:$((PB + 1))\"], \"ps\": [\"127.0.0.1:$((PB + 2))\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}" "$T/o" || fail "TF_CONFIG line: $(grep tf= "$T/o")"
[ "$(grep -c '^\[.*\] oops$' "$T/e")" = 3 ] || fail "stderr prefixes: $(cat "$T/e")"
# SLUICE_JOB_ID: 16 hex digits, the same for every task of a launch, new for the next launch
[ "$(grep -cE '^\[(worker [01]|ps 0)\] job=[0-9a-f]{16}$' "$T/o")" = 3 ] || fail "job id lines: $(grep job= "$T/o")"
[ "$(grep -o 'job=.*' "$T/o" | sort -u | wc -l)" = 1 ] || fail "tasks got different job ids: $(grep job= "$T/o")"
"$L" -n 1 --port-base $PB -- sh -c 'echo "job=$SLUICE_JOB_ID"' >"$T/o2" 2>/dev/null
[ "$(grep -o 'job=.*' "$T/o2")" != "$(grep -o 'job=.*' "$T/o" | head -n 1)" ] || fail "two launches share job id $(cat "$T/o2")"
[ $fails -eq 0 ] && ok "environment, prefixes, ps stopped after the workers"

# 2. a failing task: its status comes back, the sleepers are stopped quickly
MARK=6$((PB % 10)).$$  # a sleep duration no other process uses, to look for survivors
start=$(date +%s)
"$L" -n 4 --grace 2 -- sh -c 'if [ "$SLUICE_RANK" = 2 ]; then sleep 0.3; echo bye; exit 7; fi; exec sleep '$MARK >"$T/o" 2>"$T/e"
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 7 ] || fail "exit status $rc, expected 7"
# the sleepers sleep MARK (60 s and more): a launcher back before that stopped them
[ $took -lt 60 ] || fail "took $took s: the others ran to their end"
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

# 5. SIGTERM to the launcher reaches the tasks (sent once both have their trap: each says so
#    with a file)
"$L" -n 2 --grace 2 -- sh -c 'trap "echo got-term; exit 0" TERM; touch '"$T"'/trap.$SLUICE_RANK; sleep 30 & wait' \
    >"$T/o" 2>"$T/e" &
lp=$!
for _ in $(seq 600); do [ -f "$T/trap.0" ] && [ -f "$T/trap.1" ] && break; sleep 0.05; done
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

# 8. a ps job: worker 1 fails (exit 3) and is let go; the chief succeeds (after worker 1
#    failed: it waits for worker 1's file); the ps returns by itself once the chief is done
#    (it waits for a file the chief writes) -> exit 0
"$L" -n 3 --ps 1 --port-base $PB -- sh -c '
    case "$SLUICE_TASK" in
    "worker 1") echo failing; touch '"$T"'/w1-failing; exit 3 ;;
    "worker 0") for i in $(seq 600); do [ -f '"$T"'/w1-failing ] && break; sleep 0.05; done
                touch '"$T"'/chief-done; echo chief done ;;
    "worker 2") ;;
    "ps 0") for i in $(seq 600); do [ -f '"$T"'/chief-done ] && break; sleep 0.05; done; echo ps returns ;;
    esac' >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 0 ] || fail "ps job with a failed worker: exit $rc, expected 0: $(cat "$T/e")"
grep -qx "\[launch\] worker 1 exited with status 3: training goes on without it" "$T/e" || fail "let-go line: $(cat "$T/e")"
for task in "worker 0" "worker 1" "worker 2" "ps 0"; do
    [ "$(grep -c "^\[launch\] started $task (pid [0-9]*)$" "$T/e")" = 1 ] || fail "no start line for $task: $(cat "$T/e")"
done
grep -qx "\[worker 0\] chief done" "$T/o" && grep -qx "\[ps 0\] ps returns" "$T/o" || fail "outputs: $(cat "$T/o")"
grep -q "stopping the others\|still runs" "$T/e" && fail "the job or the ps was stopped: $(cat "$T/e")"
[ $fails -eq 0 ] && ok "ps job: a failed worker is let go, exit 0 when the chief succeeded"

# 9. a worker killed by a signal in a ps job: let go too; the ps is stopped after lingering
#    (--timeout passing while it lingers does not turn the job's success into 124)
"$L" -n 2 --ps 1 --grace 1 --timeout 2 --port-base $PB -- sh -c '
    case "$SLUICE_TASK" in
    "worker 1") kill -9 $$ ;;
    "worker 0") ;;
    *) exec sleep 30 ;;
    esac' >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 0 ] || fail "killed worker in a ps job: exit $rc, expected 0"
grep -qx "\[launch\] worker 1 exited with status 137 (signal 9): training goes on without it" "$T/e" || fail "signal let-go line: $(cat "$T/e")"
grep -qx "\[launch\] ps 0 still runs 5 s after the workers finished: stopping it" "$T/e" || fail "no linger note: $(cat "$T/e")"
[ $fails -eq 0 ] && ok "ps job: a killed worker is let go, the lingering ps stopped"

# 10. in a ps job the chief's failure and a ps's failure stop all, with their status
"$L" -n 2 --ps 1 --grace 1 --port-base $PB -- sh -c '[ "$SLUICE_TASK" = "worker 0" ] && { sleep 0.2; exit 6; }; exec sleep '$MARK >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 6 ] || fail "chief failure in a ps job: exit $rc, expected 6"
grep -q "sluice-launch: worker 0 exited with status 6; stopping the others" "$T/e" || fail "chief stderr: $(cat "$T/e")"
"$L" -n 2 --ps 1 --grace 1 --port-base $PB -- sh -c '[ "$SLUICE_TASK" = "ps 0" ] && { sleep 0.2; exit 4; }; exec sleep '$MARK >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 4 ] || fail "ps failure: exit $rc, expected 4"
grep -q "sluice-launch: ps 0 exited with status 4; stopping the others" "$T/e" || fail "ps stderr: $(cat "$T/e")"
pgrep -f "sleep $MARK" >/dev/null && fail "a sleeper survived"
[ $fails -eq 0 ] && ok "ps job: the chief (6) or a ps (4) failing stops all"

# 11. --restarts: a worker and a ps that fail once (a marker file each) are restarted with
#     the same environment but SLUICE_RESTART=1; the job succeeds. The chief ends only once
#     both restarted tasks are running (each touches MARK.again), so the restarts happen
#     mid-job however the tasks are scheduled.
rm -f "$T"/mark.*
"$L" -n 2 --ps 1 --restarts 1 --port-base $PB -- sh -c '
    m='"$T"'/mark.$(echo "$SLUICE_TASK" | tr " " _)
    echo "tf=$TF_CONFIG"
    echo "restart=$SLUICE_RESTART"
    case "$SLUICE_TASK" in
    "worker 1"|"ps 0") if [ ! -f $m ]; then touch $m; exit 5; fi; touch $m.again ;;
    "worker 0") for i in $(seq 600); do [ -f '"$T"'/mark.worker_1.again ] && [ -f '"$T"'/mark.ps_0.again ] && break
                sleep 0.05; done ;;
    esac' >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 0 ] || fail "--restarts 1: exit $rc, expected 0: $(cat "$T/e")"
for task in "worker 1" "ps 0"; do
    grep -qx "\[launch\] $task exited with status 5" "$T/e" && grep -qx "\[launch\] restarting $task (restart 1 of 1)" "$T/e" ||
        fail "no restart of $task: $(cat "$T/e")"
    [ "$(grep -c "^\[launch\] started $task (pid [0-9]*)$" "$T/e")" = 2 ] || fail "$task not started twice"
    [ "$(grep "^\[$task\] tf=" "$T/o" | sort -u | wc -l)" = 1 ] && [ "$(grep -c "^\[$task\] tf=" "$T/o")" = 2 ] ||
        fail "$task's restart has another TF_CONFIG: $(grep "^\[$task\] tf=" "$T/o")"
    [ "$(grep "^\[$task\] restart=" "$T/o" | tr '\n' ' ')" = "[$task] restart=0 [$task] restart=1 " ] ||
        fail "$task's SLUICE_RESTART: $(grep "^\[$task\] restart=" "$T/o")"
done
[ "$(grep -c '^\[launch\] started worker 0 ' "$T/e")" = 1 ] || fail "worker 0 restarted"
[ $fails -eq 0 ] && ok "--restarts 1: a failed worker and ps restarted with the same environment (SLUICE_RESTART=1), exit 0"

# 12. restarts run out: a ring task that always fails is started 1 + 2 times, then stops all
"$L" -n 2 --restarts 2 --grace 1 --port-base $PB -- sh -c '[ "$SLUICE_RANK" = 1 ] && exit 9; exec sleep '$MARK >"$T/o" 2>"$T/e"
rc=$?
[ $rc -eq 9 ] || fail "restarts exhausted: exit $rc, expected 9"
[ "$(grep -c '^\[launch\] started worker 1 ' "$T/e")" = 3 ] || fail "worker 1 starts: $(cat "$T/e")"
grep -qx "\[launch\] restarting worker 1 (restart 2 of 2)" "$T/e" || fail "no second restart"
grep -q "sluice-launch: worker 1 exited with status 9; stopping the others" "$T/e" || fail "stderr: $(cat "$T/e")"
pgrep -f "sleep $MARK" >/dev/null && fail "a sleeper survived"
[ $fails -eq 0 ] && ok "--restarts 2 exhausted: 3 starts, then status 9"

# 13. --keygen: keypair and public files in the transport's format, paths printed
if "$L" --keygen "$T/server" --keygen="$T/worker0" >"$T/o" 2>"$T/e"; then
    [ "$(cat "$T/o")" = "$T/server.key
$T/server.pub
$T/worker0.key
$T/worker0.pub" ] || fail "--keygen output: $(cat "$T/o")"
    for k in server worker0; do
        grep -qE '^ *public-key = "[^"]{40}"$' "$T/$k.key" || fail "$k.key: $(cat "$T/$k.key")"
        grep -qE '^ *secret-key = "[^"]{40}"$' "$T/$k.key" || fail "$k.key has no secret key"
        grep -q 'secret-key' "$T/$k.pub" && fail "$k.pub holds the secret key"
        [ "$(grep 'public-key' "$T/$k.pub")" = "$(grep 'public-key' "$T/$k.key")" ] || fail "$k.pub does not match $k.key"
        [ "$(stat -c %a "$T/$k.key")" = 600 ] || fail "$k.key mode $(stat -c %a "$T/$k.key")"
    done
    [ "$(grep public-key "$T/server.key")" != "$(grep public-key "$T/worker0.key")" ] || fail "two keygens made the same key"
else
    fail "--keygen exited $?: $(cat "$T/e")"
fi
"$L" --keygen "$T/x" -n 2 -- true >/dev/null 2>"$T/e"; rc=$?
[ $rc -eq 2 ] || fail "--keygen with a job: exit $rc, expected 2"
"$L" --keygen /nonexistent/dir/k >/dev/null 2>"$T/e"; rc=$?
[ $rc -eq 1 ] || fail "--keygen into a missing folder: exit $rc, expected 1"
grep -q "/nonexistent/dir/k" "$T/e" || fail "--keygen error does not name the file: $(cat "$T/e")"
[ $fails -eq 0 ] && ok "--keygen writes key files, refuses a job, names an unwritable path"

# 7. a real ring: 3 replicas resolve TF_CONFIG, allreduce 1,000,003 floats exactly
EX=$BIN/example_ring_allreduce
if [ -x "$EX" ]; then
    "$L" -n 3 --port-base $((PB + 10)) -- "$EX" --count 1000003 --reps 2 >"$T/o" 2>"$T/e"
    rc=$?
    [ $rc -eq 0 ] || fail "ring run exited $rc: $(cat "$T/e")"
    for r in 0 1 2; do
        grep -q "^\[worker $r\] rank $r/3 (127.0.0.1:$((PB + 10 + r))): allreduce of 1000003 floats ok, .*broadcast \"hello from rank 2\"; dropped 0; path shm$" "$T/o" ||
            fail "rank $r line: $(cat "$T/o")"
    done
    # a replica that fails: its status is the launcher's, the others are stopped. It fails
    # before it connects (--fail-early), so the others are held waiting for it (30 s) until
    # the launcher stops them: had it died mid-collective, a peer that saw it die could exit
    # (status 1) before the dying process's own exit reached the launcher.
    "$L" -n 3 --grace 2 --port-base $((PB + 20)) -- "$EX" --fail-rank 1 --fail-early --timeout 30 >"$T/o" 2>"$T/e"
    rc=$?
    [ $rc -eq 3 ] || fail "failing replica: exit $rc, expected 3: $(cat "$T/e")"
    grep -q "^\[worker 1\] rank 1: failing on purpose$" "$T/e" || fail "failing replica stderr: $(cat "$T/e")"
    [ $fails -eq 0 ] && ok "3-replica ring allreduce through sluice-launch"
else
    echo "  (example_ring_allreduce not built: ring part not run)"
fi

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
