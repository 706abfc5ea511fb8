#!/usr/bin/env bash
# Ctrl-C for lockstep replicas: they stop together at one step boundary with a checkpoint.
#   1. strategy ring, 2 replicas: SIGINT to sluice-launch mid-run (it passes it to both):
#      launcher exit 130; both replicas say they stopped at the same step S; the chief's
#      checkpoint of step S is there; the replicas' parameter hashes agree up to S; the chief
#      prints the launch command that resumes the job; that command (with the epochs cut
#      short) resumes at step S (the checkpoint passes every check) and finishes: exit 0.
#   2. strategy ring: SIGINT to worker 1 alone: worker 0 stops at the same step, names rank
#      1, checkpoints it; both exit 130, and so does the launcher (no SIGTERM needed).
#   3. strategy ps mode=sync, 2 workers + 1 ps: SIGINT to sluice-launch: both workers stop at
#      the same step, the chief checkpoints it, the ps saves its shard and says so; exit 130;
#      --resume finishes the run from that step (the ps restores its shard).
#   4. sluice-launch: tasks that exit 1 on the forwarded signal (a failed stop): exit 1, noted.
# Ports: blocks 28000..31999, offsets 38..49 (tests/integration/lib.sh).
set -u

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record sluice-launch
sl_require_fashion
sl_workdir stop
sl_kill_on_exit KILL
PB=$(sl_port_base 28038)
sl_convert_fashion 2 1000 # 2 shards of 500 train records: one per replica

# 500 records per replica, global batch 50 (25 each): 20 steps per epoch
sl_tiny_fashion_config "$T/ring.sl" "shard auto" "epochs 300" "optimizer sgd lr=0.05 momentum=0.9" \
    "checkpoint every=1 keep=3" "strategy ring"
sed 's/^    strategy ring$/    strategy ps mode=sync/' "$T/ring.sl" >"$T/ps.sl"
SPE=20

# finish NAME: wait for the launcher (bounded by its --timeout); $rc its status
finish() {
    wait "$lp"
    rc=$?
}
# stopped_step NAME TASK: S of "[TASK] sluice-train: stopped by ... at step S..." on stderr
stopped_step() { sed -n "s/^\[$2\] sluice-train: stopped by SIGINT (Ctrl-C) at step \([0-9]*\).*/\1/p" "$T/$1.err"; }
ckpt() { printf '%s/ckpt-%09d.safetensors' "$1" "$2"; }
show() { echo "    --- $1"; sed 's/^/    /' "$T/$1.err" "$T/$1.out" | grep -v '^    \[worker 0\] epoch' | tail -n 25; }
L=(--timeout 90)

# 1. ring: SIGINT to the launcher
R1=$T/ring1
launch ring1 -n 2 --port-base "$PB" "${L[@]}" -- "$BIN/sluice-train" "$T/ring.sl" --run-dir "$R1" --hash-log "$T/h1"
if wait_for 60 grep -q '^\[worker 0\] epoch 2/300 ' "$T/ring1.out"; then
    kill -INT "$lp"
    finish
    [ "$rc" = 130 ] && ok "ring, SIGINT to sluice-launch: exit 130" || { fail "ring SIGINT: exit $rc"; show ring1; }
    s0=$(stopped_step ring1 "worker 0") s1=$(stopped_step ring1 "worker 1")
    if [ -n "$s0" ] && [ "$s0" = "$s1" ] && [ "$s0" -ge 40 ]; then
        ok "both replicas stopped at step $s0"
    else
        fail "stopped at '$s0' and '$s1'"; show ring1
    fi
    S=${s0:-0}
    grep -qx "\[worker 0\] sluice-train: stopped by SIGINT (Ctrl-C) at step $S (every replica stops at this step); saved checkpoint $(ckpt "$R1" "$S")" "$T/ring1.err" &&
        [ -f "$(ckpt "$R1" "$S")" ] && ok "the chief checkpointed step $S" || { fail "no checkpoint of step $S: $(ls "$R1")"; show ring1; }
    grep -qx "\[worker 1\] sluice-train: stopped by SIGINT (Ctrl-C) at step $S (every replica stops at this step)" "$T/ring1.err" &&
        ok "worker 1 says where it stopped" || { fail "worker 1's line"; show ring1; }
    grep -qE "^\[worker 0\] stop requested \(rank [01]\): all 2 replicas stop at step $S$" "$T/ring1.out" &&
        ok "the chief's stop line" || fail "stop line: $(grep 'stop requested' "$T/ring1.out")"
    grep -q "test accuracy" "$T/ring1.out" && fail "a final evaluation after the stop" || ok "no final evaluation"
    want="[worker 0] ---> HINT: resume with: sluice-launch -n 2 --port-base $PB -- sluice-train $T/ring.sl --run-dir $R1 --hash-log $T/h1 --resume"
    grep -qxF "$want" "$T/ring1.err" && ok "the chief prints the launch command that resumes" ||
        { fail "resume hint: $(grep HINT "$T/ring1.err")"; echo "    want: $want"; }
    grep -q "while stopping\|stopping the others" "$T/ring1.err" && { fail "launcher notes"; show ring1; } || ok "no failed stop"
    # the parameters after every step agree on both replicas, up to the stop
    if [ -s "$T/h1.0" ] && cmp -s "$T/h1.0" "$T/h1.1"; then
        grep -q "^step $S params " "$T/h1.0" && ok "replicas bit-identical up to step $S ($(wc -l <"$T/h1.0") hashes)" ||
            fail "hash log ends at: $(tail -n 1 "$T/h1.0")"
    else
        fail "hash logs differ: $(diff "$T/h1.0" "$T/h1.1" | head -4)"
    fi
    # the printed command, with the run cut to the next epoch, resumes at S and finishes
    E=$((S / SPE + 1))
    if run ring1r 0 "$BIN/sluice-launch" -n 2 --port-base $((PB + 2)) "${L[@]}" -- "$BIN/sluice-train" "$T/ring.sl" \
        --run-dir "$R1" --set train.epochs=$((E + 1)) --resume; then
        grep -qE "^\[worker 0\] resuming from $(ckpt "$R1" "$S") at step $S \(epoch $E, batch $((S % SPE))\)$" "$T/ring1r.out" &&
            ! grep -q "skipping damaged" "$T/ring1r.err" && ok "--resume: from the stop checkpoint (it passes every check)" ||
            { fail "resume line: $(grep resuming "$T/ring1r.out")"; show ring1r; }
        tail -n 1 "$T/ring1r.out" | grep -qE '^\[worker 0\] test accuracy 0\.[0-9]{4}$' &&
            [ -f "$(ckpt "$R1" $(((E + 1) * SPE)))" ] && ok "--resume finished the run: $(tail -n 1 "$T/ring1r.out")" ||
            { fail "resumed run's end"; show ring1r; }
    else
        show ring1r
    fi
else
    fail "ring: no second epoch line in 60 s"; show ring1
    kill -KILL "$lp"
fi

# 2. ring: SIGINT to worker 1 only
R2=$T/ring2
launch ring2 -n 2 --port-base $((PB + 4)) "${L[@]}" -- "$BIN/sluice-train" "$T/ring.sl" --run-dir "$R2"
if wait_for 60 grep -q '^\[worker 0\] epoch 2/300 ' "$T/ring2.out"; then
    kill -INT "$(started_pid ring2 "worker 1")"
    finish
    [ "$rc" = 130 ] && ok "ring, SIGINT to worker 1 alone: launcher exit 130" || { fail "exit $rc"; show ring2; }
    s0=$(stopped_step ring2 "worker 0") s1=$(stopped_step ring2 "worker 1")
    [ -n "$s0" ] && [ "$s0" = "$s1" ] && ok "both stopped at step $s0" || { fail "stopped at '$s0' and '$s1'"; show ring2; }
    grep -qx "\[worker 0\] sluice-train: stopped by SIGINT (Ctrl-C) at step $s0 (rank 1 got it; every replica stops at this step); saved checkpoint $(ckpt "$R2" "$s0")" "$T/ring2.err" &&
        [ -f "$(ckpt "$R2" "$s0")" ] && ok "worker 0 names rank 1 and checkpoints step $s0" || { fail "worker 0's line"; show ring2; }
    grep -qx "\[worker 1\] sluice-train: stopped by SIGINT (Ctrl-C) at step $s0 (every replica stops at this step)" "$T/ring2.err" &&
        ok "worker 1's line" || { fail "worker 1's line"; show ring2; }
    grep -qE "^\[worker 0\] stop requested \(rank 1\): all 2 replicas stop at step $s0$" "$T/ring2.out" &&
        ok "the chief's stop line names rank 1" || fail "stop line: $(grep 'stop requested' "$T/ring2.out")"
    grep -q "SIGTERM" "$T/ring2.err" && { fail "a SIGTERM was needed"; show ring2; } || ok "no SIGTERM: both stopped by themselves"
    grep -qE "^\[launch\] worker [01] stopped on request \(status 130\): stopping the job; the others get 5 s to stop by themselves$" "$T/ring2.err" &&
        ok "the launcher's note: a task stopped on request" || fail "launcher notes: $(grep '^\[launch\]' "$T/ring2.err")"
else
    fail "ring2: no second epoch line in 60 s"; show ring2
    kill -KILL "$lp"
fi

# 3. ps mode=sync: SIGINT to the launcher; the ps saves its shard; --resume finishes
R3=$T/ps
launch ps -n 2 --ps 1 --port-base $((PB + 6)) "${L[@]}" -- "$BIN/sluice-train" "$T/ps.sl" --run-dir "$R3"
if wait_for 60 grep -q '^\[worker 0\] epoch 2/300 ' "$T/ps.out"; then
    kill -INT "$lp"
    finish
    [ "$rc" = 130 ] && ok "ps sync, SIGINT to sluice-launch: exit 130" || { fail "ps SIGINT: exit $rc"; show ps; }
    s0=$(stopped_step ps "worker 0") s1=$(stopped_step ps "worker 1")
    [ -n "$s0" ] && [ "$s0" = "$s1" ] && [ -f "$(ckpt "$R3" "$s0")" ] &&
        ok "both workers stopped at step $s0; the chief checkpointed it" || { fail "ps: '$s0' '$s1'"; show ps; }
    grep -qx "\[ps 0\] sluice-train: ps 0 stopped by SIGINT (Ctrl-C); its shard is saved in $R3/ps-0" "$T/ps.err" &&
        ls "$R3"/ps-0/shard-*.safetensors >/dev/null 2>&1 && ok "the ps saved its shard" || { fail "ps shard"; show ps; }
    want="[worker 0] ---> HINT: resume with: sluice-launch -n 2 --ps 1 --port-base $((PB + 6)) -- sluice-train $T/ps.sl --run-dir $R3 --resume"
    grep -qxF "$want" "$T/ps.err" && ok "the hint has --ps 1" || fail "ps hint: $(grep HINT "$T/ps.err")"
    S=${s0:-0} E=$((${s0:-0} / SPE + 1))
    if run psr 0 "$BIN/sluice-launch" -n 2 --ps 1 --port-base $((PB + 9)) "${L[@]}" -- "$BIN/sluice-train" "$T/ps.sl" \
        --run-dir "$R3" --set train.epochs=$((E + 1)) --resume; then
        grep -qE "^\[worker 0\] resuming from $(ckpt "$R3" "$S") at step $S " "$T/psr.out" &&
            grep -q "^\[ps 0\] ps 0: restored $R3/ps-0/shard-" "$T/psr.out" &&
            tail -n 1 "$T/psr.out" | grep -qE '^\[worker 0\] test accuracy 0\.[0-9]{4}$' &&
            ok "ps --resume from step $S finished: $(tail -n 1 "$T/psr.out")" || { fail "ps resume"; show psr; }
    else
        show psr
    fi
else
    fail "ps: no second epoch line in 60 s"; show ps
    kill -KILL "$lp"
fi

# 4. a stop that fails (a task exits 1 on the forwarded SIGINT): the launcher says so and
#    exits with that status, not 130
launch fstop -n 2 "${L[@]}" -- sh -c 'trap "kill \$! 2>/dev/null; exit 1" INT; echo ready; sleep 30 </dev/null >/dev/null 2>&1 & wait'
both_ready() { [ "$(grep -c '\] ready$' "$T/fstop.out")" = 2 ]; }
if wait_for 20 both_ready; then
    kill -INT "$lp"
    finish
    [ "$rc" = 1 ] && grep -qE "^\[launch\] worker [01] exited with status 1 while stopping$" "$T/fstop.err" &&
        ok "a failed stop: launcher exit 1 with a note" || { fail "failed stop: exit $rc"; show fstop; }
else
    fail "fstop: the tasks did not start"; show fstop
    kill -KILL "$lp"
fi

if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "PASS: test_train_stop_replicas"
