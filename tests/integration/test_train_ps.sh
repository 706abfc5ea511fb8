#!/usr/bin/env bash
# `strategy ps` end to end with examples/fashion_mlp.sl (MLP 784-256-128-10) on the whole
# Fashion-MNIST conversion, 2 workers and 1 ps started by sluice-launch:
#   1. a plain run of the example's 15 epochs: exit 0, the ps serves all 235146 parameters,
#      checkpoints its shard, and the chief's test accuracy is >= 0.875 (the issue's bar;
#      measured: 0.88-0.89);
#   2. worker 1 killed (SIGKILL) mid-run: the launcher lets it go, the chief finishes all
#      its epochs, exit 0, accuracy >= KBAR;
#   3. the ps killed after its first trained shard checkpoint, with --restarts 1: the
#      launcher restarts it, it restores its newest shard (version > 0), the workers carry
#      on, exit 0, accuracy >= KBAR;
#   5. the chief killed half-way, with --restarts 1: it resumes from its own checkpoint (kept,
#      not removed as a fresh run would), the ps moves it to its recorded step, exit 0, >= KBAR;
#   every kill happens while the workers are held after epoch KEPOCHS/2 (sluice-train
#   --hold-after/--hold-until), never against a clock: the task killed is always mid-run;
#   4. a cluster block with `curve` (keys from sluice-launch --keygen): training works;
#      with an allow-list that lacks the workers' keys they cannot join: the chief fails
#      naming the ps and nothing is trained. Case 4 runs beside 2 (its own ports): its
#      denied half mostly waits on timeouts.
# The kill cases (2, 3, 5) check recovery, not the model's final quality (case 1 holds the
# bar on the same code path): they train KEPOCHS = 4 epochs, killed after epoch 2
# (the ps: once it has a trained shard), to KBAR = 0.85 (measured 0.868-0.873): that training
# still converges after the kill; that nothing was lost is checked by the restore line (a shard
# version > 0) and the resume line (the chief's checkpoint step). With 15 epochs each, as
# before, the test took 192 s of a 2-core machine's 16-minute CI run, its critical path.
# backend cpu and 1 thread per task; SLUICE_PS_EPOCHS=N sets every case's epochs.
set -u

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record sluice-launch
sl_require_fashion
sl_workdir ps
SRC=${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
# SIGTERM, not SIGKILL: the launcher passes it on to its tasks' process groups
sl_kill_on_exit TERM
# ports of our own, so parallel test runs do not collide, below Linux's ephemeral ports
# (32768..60999: the source ports of other tests' connections)
PB=$((20000 + ($$ % 120) * 100 + 50))
EPOCHS=${SLUICE_PS_EPOCHS:-15}
KEPOCHS=${SLUICE_PS_EPOCHS:-4}
RECORDS=60000
BAR=0.875
KBAR=0.85
if [ -n "${SLUICE_SANITIZE:-}" ]; then
    # under a sanitizer (3-10x slower) the same paths run for 2 epochs over a sixth of the
    # data: what this build checks is memory and thread safety, not accuracy (4 epochs over
    # all 60,000 took 9 minutes, 2 over 20,000 two), so the bar is only a floor that says
    # the model learned (chance is 0.10); the plain build holds the bar above. The kills
    # still come mid-run: while the workers are held after epoch 1 of 2.
    EPOCHS=${SLUICE_PS_EPOCHS:-2}
    KEPOCHS=$EPOCHS
    RECORDS=10000
    BAR=0.5
    KBAR=0.5
fi
HALF=$((KEPOCHS / 2))
# per worker: 4 of the 8 shards (RECORDS/2 records), batch 128/2, drop_remainder
STEPS=$((RECORDS / 2 / 64 * EPOCHS))
KSTEPS=$((RECORDS / 2 / 64 * KEPOCHS))
sl_convert_fashion 8 "$RECORDS"

sed -e 's#"\.\./data/fashion/#"data/#' -e "s#^\( *epochs\) [0-9]*#\1 $EPOCHS#" \
    -e 's#^\( *\)backend auto#\1backend cpu\n\1threads 1#' "$SRC/examples/fashion_mlp.sl" >"$T/mlp.sl"
for want in '"data/train-\*.tfrecord"' '"data/test-\*.tfrecord"' "epochs $EPOCHS\$" 'backend cpu$' 'threads 1$'; do
    grep -q "$want" "$T/mlp.sl" || { echo "FAIL: examples/fashion_mlp.sl changed: no '$want' after the edits"; exit 1; }
done
PS=(--set train.strategy=ps)
TRAIN=("$BIN/sluice-train" "$T/mlp.sl" "${PS[@]}")
KTRAIN=("${TRAIN[@]}" --set "train.epochs=$KEPOCHS")

# acc NAME: the chief's final test accuracy from $T/NAME.out ("" when the last line is not it)
acc() { tail -n 1 "$T/$1.out" | sed -n 's/^\[worker 0\] test accuracy \(0\.[0-9]\{4\}\)$/\1/p'; }
# check_acc NAME WHAT [BAR]: the accuracy reached the bar ($BAR by default)
check_acc() {
    local a b=${3:-$BAR}
    a=$(acc "$1")
    if [ -z "$a" ]; then fail "$2: last line '$(tail -n 1 "$T/$1.out")'"
    elif awk -v a="$a" -v b="$b" 'BEGIN { exit !(a >= b) }'; then ok "$2: test accuracy $a >= $b"
    else fail "$2: test accuracy $a < $b"; fi
}
have_shard() { ls "$1"/ps-0/shard-*.safetensors >/dev/null 2>&1; }
# a shard past version 0 (the ps also saves the chief's initial parameters, as version 0)
have_trained_shard() { ls "$1"/ps-0/ 2>/dev/null | grep -q '^shard-0*[1-9][0-9]*\.safetensors$'; }
ckpt_final() { printf '%s/ckpt-%09d.safetensors' "$1" "${2:-$STEPS}"; }
t_all=$(date +%s)

# 1. two workers, one ps
t0=$(date +%s)
if run plain 0 "$BIN/sluice-launch" -n 2 --ps 1 --port-base "$PB" -- "${TRAIN[@]}" --run-dir "$T/run1"; then
    check_acc plain "2 workers + 1 ps, $EPOCHS epochs ($(($(date +%s) - t0)) s)"
    grep -qE '^\[ps 0\] ps 0: serving 235146 floats of 235146 \(plan [0-9a-f]{8}\) for 2 workers$' "$T/plain.out" &&
        ok "ps 0 serves all 235146 parameters" || fail "no serving line: $(grep '^\[ps 0\]' "$T/plain.out" | head -3)"
    n=$(grep -c "^\[worker 0\] epoch [0-9]*/$EPOCHS  step " "$T/plain.out")
    [ "$n" = "$EPOCHS" ] && ok "the chief printed $EPOCHS epoch lines" || fail "$n epoch lines, expected $EPOCHS"
    n=$(grep -c '^\[worker 1\]' "$T/plain.out")
    [ "$n" = 0 ] && ok "worker 1 is silent" || fail "worker 1 printed $n lines"
    [ -f "$(ckpt_final "$T/run1")" ] && ok "the chief checkpointed step $STEPS" || fail "no $(ckpt_final "$T/run1")"
    have_shard "$T/run1" && ok "ps shard checkpoint: $(basename "$(ls "$T/run1"/ps-0/shard-*.safetensors | tail -n 1)")" ||
        fail "no shard checkpoint in $T/run1/ps-0"
    grep -q 'stopping\|goes on without\|restarting' "$T/plain.err" &&
        fail "launcher notes: $(grep '^\[launch\]\|^sluice-launch' "$T/plain.err" | grep -v started)" ||
        ok "no launcher notes: the ps returned by itself after the workers' BYE"
fi

# 4. CURVE: keys from --keygen, the cluster block names them. Runs in the background beside
# case 2 (its own ports; the denied half mostly waits on timeouts); its lines are printed, and
# its FAIL lines counted, after case 5.
case_curve() {
    K=$T/keys
    mkdir -p "$K"
    if run keygen 0 "$BIN/sluice-launch" --keygen "$K/server" --keygen "$K/worker0" --keygen "$K/worker1" --keygen "$K/ps0"; then
        cat "$K/worker0.pub" "$K/worker1.pub" "$K/ps0.pub" >"$K/allow"
        cp "$K/ps0.pub" "$K/allow-ps-only"
        # curve_cfg ALLOW PORT: the example plus a cluster block with these ports and keys
        curve_cfg() {
            cat "$T/mlp.sl"
            cat <<EOF
    cluster {
        worker "127.0.0.1:$2" "127.0.0.1:$(($2 + 1))"
        ps "127.0.0.1:$(($2 + 2))"
        timeout 5s
        curve server="$K/server.key" client="$K/{task}.key" allow="$1"
    }
EOF
        }
        curve_cfg "$K/allow" $((PB + 30)) >"$T/curve.sl"
        if run curve 0 "$BIN/sluice-launch" -n 2 --ps 1 --port-base $((PB + 30)) -- "$BIN/sluice-train" "$T/curve.sl" \
            "${PS[@]}" --set train.epochs=1 --run-dir "$T/run4"; then
            a=$(acc curve)
            [ -n "$a" ] && ok "CURVE with every task's key allowed: 1 epoch, test accuracy $a" ||
                fail "CURVE run: last line '$(tail -n 1 "$T/curve.out")'"
            have_shard "$T/run4" && ok "the CURVE ps checkpointed its shard" || fail "no shard in $T/run4/ps-0"
        fi
        # the workers' keys are not allowed: their HELLO never reaches the ps
        curve_cfg "$K/allow-ps-only" $((PB + 40)) >"$T/denied.sl"
        RETRY=()
        if "$BIN/sluice-train" --help | grep -q -- '--retry'; then RETRY=(--retry 5); fi
        if [ ${#RETRY[@]} = 0 ]; then
            echo "  (sluice-train has no --retry: a worker would wait 120 s for the ps; denied case not run)"
        else
            t0=$(date +%s)
            if run denied 1 "$BIN/sluice-launch" -n 2 --ps 1 --grace 2 --port-base $((PB + 40)) -- "$BIN/sluice-train" \
                "$T/denied.sl" "${PS[@]}" --set train.epochs=1 --run-dir "$T/run5" --timeout 2 "${RETRY[@]}"; then
                took=$(($(date +%s) - t0))
                if grep -q "^\[worker 0\] sluice-train: .*ps 0 (127.0.0.1:$((PB + 42)))" "$T/denied.err"; then
                    ok "workers not on the allow-list fail naming the ps in ${took} s: $(grep '^\[worker 0\] sluice-train' "$T/denied.err" | head -n 1)"
                else fail "the chief's error does not name ps 0:"; grep -v '^\[launch\]' "$T/denied.err" | head -5; fi
                grep -q "sluice-launch: worker 0 exited with status 1; stopping the others" "$T/denied.err" &&
                    ok "the chief's failure stopped the job" || fail "launcher notes: $(grep -v '^\[worker' "$T/denied.err")"
                n=$(grep -c '^\[worker 0\] epoch ' "$T/denied.out")
                ls "$T/run5"/ckpt-*.safetensors "$T/run5"/ps-0/shard-*.safetensors >/dev/null 2>&1 && fail "something was checkpointed"
                [ "$n" = 0 ] && ok "nothing was trained" || fail "$n epoch lines"
            fi
        fi
    fi
}
case_curve >"$T/case4.log" 2>&1 &
curve_pid=$!
pids+=("$curve_pid")

# The kills happen while the workers are held (sluice-train --hold-after E --hold-until FILE:
# after epoch E and its checkpoint every worker prints a "held" line and waits for FILE), so
# the task to kill is alive and mid-run however fast the machine is; FILE then releases them.
HOLD=(--hold-after "$HALF")
# held NAME: both workers of $T/NAME.err are held after epoch HALF (bounded: 120 s)
both_held() {
    grep -q "^\[worker 0\] sluice-train: held after epoch $HALF " "$T/$1.err" &&
        grep -q "^\[worker 1\] sluice-train: held after epoch $HALF " "$T/$1.err"
}
held() { wait_for 120 both_held "$1"; }
# kill_wait NAME PID OK FAILED: SIGKILL PID, release the held workers ($T/NAME.go), wait for
# the launcher; ok OK when it exits 0, else fail FAILED with its status and the end of
# $T/NAME.err
kill_wait() {
    kill -9 "$2" || fail "$1: pid $2 was not running when it was killed"
    touch "$T/$1.go"
    wait "$lp"
    rc=$?
    if [ "$rc" = 0 ]; then ok "$3: launcher exit 0"; else
        fail "$4: launcher exit $rc"; tail -n 20 "$T/$1.err"; fi
}
# finished NAME RUN WHAT: the chief checkpointed step KSTEPS in $T/RUN and reached KBAR
finished() {
    [ -f "$(ckpt_final "$T/$2" "$KSTEPS")" ] && ok "the chief checkpointed step $KSTEPS" || fail "no $(ckpt_final "$T/$2" "$KSTEPS")"
    check_acc "$1" "$3" "$KBAR"
}
# give_up NAME WHY: fail WHY, show the end of $T/NAME.err and stop the launcher
give_up() {
    fail "$2"
    tail -n 20 "$T/$1.err"
    kill -TERM "$lp"
    wait "$lp"
}

# 2. kill worker 1 while it is held after epoch HALF: training goes on without it
launch wkill -n 2 --ps 1 --port-base $((PB + 10)) -- "${KTRAIN[@]}" --run-dir "$T/run2" "${HOLD[@]}" --hold-until "$T/wkill.go"
if held wkill; then
    w1=$(started_pid wkill "worker 1")
    kill_wait wkill "$w1" "worker 1 (pid $w1) killed after epoch $HALF" "worker 1 killed"
    grep -qx "\[launch\] worker 1 exited with status 137 (signal 9): training goes on without it" "$T/wkill.err" &&
        ok "the launcher let worker 1 go" || fail "no let-go note: $(grep '^\[launch\]' "$T/wkill.err")"
    n=$(grep -c "^\[worker 0\] epoch [0-9]*/$KEPOCHS  step " "$T/wkill.out")
    [ "$n" = "$KEPOCHS" ] && ok "the chief trained all $KEPOCHS epochs" || fail "$n epoch lines from the chief"
    grep -q "^\[launch\] ps 0 still runs" "$T/wkill.err" && fail "the ps did not return by itself (worker 1 not seen as lost)" ||
        ok "the ps returned by itself: it saw worker 1 lost and the chief's BYE"
    finished wkill run2 "without worker 1 after epoch $HALF of $KEPOCHS"
else
    give_up wkill "the workers were never held after epoch $HALF"
fi

# 3. kill the ps once it has checkpointed a trained shard (past version 0) while both workers
# are held after epoch HALF (the ps saves every 5 s while it has news); --restarts 1 brings
# it back from that shard
launch pkill -n 2 --ps 1 --restarts 1 --port-base $((PB + 20)) -- "${KTRAIN[@]}" --run-dir "$T/run3" "${HOLD[@]}" \
    --hold-until "$T/pkill.go"
if held pkill && wait_for 120 have_trained_shard "$T/run3"; then
    p0=$(started_pid pkill "ps 0")
    kill_wait pkill "$p0" "ps 0 (pid $p0) killed after its first trained shard checkpoint" "ps killed"
    grep -qx "\[launch\] ps 0 exited with status 137 (signal 9)" "$T/pkill.err" &&
        grep -qx "\[launch\] restarting ps 0 (restart 1 of 1)" "$T/pkill.err" && ok "the launcher restarted ps 0" ||
        fail "no restart notes: $(grep '^\[launch\]' "$T/pkill.err")"
    p1=$(started_pid pkill "ps 0")
    [ -n "$p1" ] && [ "$p1" != "$p0" ] && ok "ps 0 runs again (pid $p1)" || fail "ps 0 pids $p0 -> $p1"
    line=$(grep '^\[ps 0\] ps 0: restored ' "$T/pkill.out" | head -n 1)
    v=$(sed -n 's/^\[ps 0\] ps 0: restored .*\/ps-0\/shard-[0-9]*\.safetensors (version \([0-9]*\))$/\1/p' <<<"$line")
    if [ -n "$v" ] && [ "$v" -gt 0 ]; then ok "restored with version $v: ${line#\[ps 0\] }"; else
        fail "no restore line with a version > 0: '$line'"; fi
    finished pkill run3 "after the ps restart ($KEPOCHS epochs)"
else
    give_up pkill "the workers were never held after epoch $HALF, or ps 0 never wrote a trained shard"
fi

# 5 (before 4). kill the chief while it is held after epoch HALF (its checkpoint of that
# epoch is written before the hold), with --restarts 1: it comes back, keeps its checkpoints,
# continues at the step the ps recorded for it and finishes (it resumes past epoch HALF, so
# it does not hold again)
launch ckill -n 2 --ps 1 --restarts 1 --port-base $((PB + 50)) -- "${KTRAIN[@]}" --run-dir "$T/run6" "${HOLD[@]}" \
    --hold-until "$T/ckill.go"
if held ckill; then
    w0=$(started_pid ckill "worker 0")
    kill_wait ckill "$w0" "the chief (pid $w0) killed after epoch $HALF and restarted" "chief killed"
    grep -qx "\[launch\] restarting worker 0 (restart 1 of 1)" "$T/ckill.err" && ok "the launcher restarted the chief" ||
        fail "no restart note: $(grep '^\[launch\]' "$T/ckill.err")"
    line=$(grep '^\[worker 0\] resuming from .*/ckpt-[0-9]*\.safetensors at step [0-9]*' "$T/ckill.out" | head -n 1)
    [ -n "$line" ] && ok "${line#\[worker 0\] }" || fail "the restarted chief did not resume from its checkpoint"
    grep -q 'removing them' "$T/ckill.out" && fail "the restarted chief removed its run's checkpoints" ||
        ok "the restarted chief kept its run's checkpoints"
    n=$(grep -c "^\[worker 0\] sluice-train: held after" "$T/ckill.err")
    [ "$n" = 1 ] && ok "the restarted chief did not hold again" || fail "the chief held $n times"
    finished ckill run6 "after the chief's restart ($KEPOCHS epochs)"
else
    give_up ckill "the workers were never held after epoch $HALF"
fi

wait "$curve_pid"
cat "$T/case4.log"
fails=$((fails + $(grep -c '^FAIL' "$T/case4.log")))
echo "took $(($(date +%s) - t_all)) s"
if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all ok"
