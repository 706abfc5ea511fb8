#!/usr/bin/env bash
# The sidecar evaluator: sluice-launch -n 2 --ps 1 --evaluator over a tiny MLP on 400
# Fashion-MNIST records (2 shards, 8 steps an epoch per worker), 3 epochs, a checkpoint
# every epoch (keep all):
#   1. the launcher exits 0 once the evaluator has evaluated the chief's final checkpoint;
#   2. the evaluator prints exactly one "evaluator: checkpoint step S: loss L accuracy A"
#      line per checkpoint in the run folder, in step order, for the same steps;
#   3. its last accuracy is, digit for digit, the chief's final "test accuracy";
#   4. the chief marked the run finished (RUN_DIR/finished names its last step), and
#      RUN_DIR/eval holds two event files (the chief's and the evaluator's), each with the
#      final step's accuracy equal to the printed one;
#   5. an evaluator alone on a folder without checkpoints (--timeout 1) fails, exit 1,
#      saying so; on the finished run it passes over the checkpoints written before it
#      started, and only the marker of its own job (SLUICE_JOB_ID) ends it, after it has
#      evaluated the final checkpoint; under `strategy none` the evaluator task refuses;
#   6. a worker that starts 3 s late under an async ps still joins, trains and exits 0.
# Ports: blocks 28000..31999, offsets 20..23 (tests/integration/lib.sh).
set -u

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record sluice-launch
sl_require_fashion
sl_workdir evaluator
PB=$(sl_port_base 28020)
sl_convert_fashion 2 400

sl_tiny_fashion_config "$T/mlp.sl" "shard auto" "epochs 3" "optimizer adam lr=0.01" "checkpoint every=1 keep=0" \
    "strategy ps"
R=$T/run
steps_of_ckpts() { ls "$1" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.safetensors$/\1/p' | sort -n | tr '\n' ' '; }
eval_lines() { grep '^\[evaluator 0\] evaluator: checkpoint step ' "$T/$1.out"; }

# 1-4. the job with its evaluator. The workers start once the evaluator says it watches the
# run folder (a checkpoint written before that is not new to it, by design): a wrapper waits
# for its line in the launcher's output, so a slow start of the evaluator cannot make it pass
# over the chief's first checkpoint.
printf '#!/bin/sh\ncase "$SLUICE_TASK" in worker*)\n  for i in $(seq 1200); do grep -q "^\\[evaluator 0\\] evaluator: watching " "%s" && break; sleep 0.05; done ;;\nesac\nexec "$@"\n' \
    "$T/job.out" >"$T/after_eval.sh"
chmod +x "$T/after_eval.sh"
if run job 0 "$BIN/sluice-launch" -n 2 --ps 1 --evaluator --port-base "$PB" --timeout 120 -- \
    "$T/after_eval.sh" "$BIN/sluice-train" "$T/mlp.sl" --run-dir "$R"; then
    ok "2 workers, 1 ps, 1 evaluator: exit 0"
fi
have=$(steps_of_ckpts "$R")
seen=$(eval_lines job | sed 's/.* step \([0-9]*\):.*/\1/' | tr '\n' ' ')
if [ -n "$have" ] && [ "$seen" = "$have" ]; then ok "one evaluator line per checkpoint, steps $have"
else fail "checkpoints at '$have', evaluator lines for '$seen'"; sed 's/^/    /' "$T/job.err" | tail -n 15; fi
eval_lines job | grep -vqE ': loss [0-9]+\.[0-9]{4} accuracy 0\.[0-9]{4}$' && fail "line format: $(eval_lines job)" ||
    ok "line format: $(eval_lines job | tail -n 1)"
chief=$(sed -n 's/^\[worker 0\] test accuracy \(0\.[0-9]\{4\}\)$/\1/p' "$T/job.out")
last=$(eval_lines job | tail -n 1 | sed 's/.* accuracy //')
[ -n "$chief" ] && [ "$last" = "$chief" ] && ok "evaluator's last accuracy $last = the chief's test accuracy" ||
    fail "evaluator's last accuracy '$last', chief's '$chief'"
final=$(echo "$have" | awk '{print $NF}')
grep -qxE "job [0-9a-f]{16} step $final" "$R/finished" 2>/dev/null && ok "the chief's marker: $(cat "$R/finished")" ||
    fail "marker: $(cat "$R/finished" 2>&1)"
DUMP=${SLUICE_TESTS_BIN:-build/tests}/test_tfevents
if [ -x "$DUMP" ]; then
    n=0
    for f in "$R"/eval/events.out.tfevents.*; do
        a=$("$DUMP" --dump "$f" | awk -v s="$final" '$1 == "scalar" && $3 == s && $4 == "accuracy" {printf "%.4f", $5}')
        [ "$a" = "$chief" ] && n=$((n + 1))
    done
    [ "$n" = 2 ] && ok "eval/: two event files with accuracy $chief at step $final" || fail "eval/ files: $(ls "$R/eval")"
fi

# 5. the evaluator alone: no checkpoint ever comes; a marker of another job does not end it
E=(env "TF_CONFIG={\"cluster\": {\"worker\": [\"127.0.0.1:$PB\"], \"ps\": [\"127.0.0.1:$((PB + 1))\"], \"evaluator\": [\"127.0.0.1:$((PB + 2))\"]}, \"task\": {\"type\": \"evaluator\", \"index\": 0}}" SLUICE_JOB_ID=5e1f)
mkdir -p "$T/empty"
if run alone 1 "${E[@]}" "$BIN/sluice-train" "$T/mlp.sl" --run-dir "$T/empty" --timeout 1; then
    grep -qx "sluice-train: evaluator: no checkpoint in $T/empty after 1 s" "$T/alone.err" &&
        ok "no checkpoint: exit 1, said" || fail "alone: $(cat "$T/alone.err")"
fi
# the finished run: its checkpoints are older than the evaluator (not new), but the final
# one named by the marker of its own job is evaluated: the chief's accuracy again, exit 0
if run other 1 "${E[@]}" "$BIN/sluice-train" "$T/mlp.sl" --run-dir "$R" --timeout 2; then
    ! grep -q '^evaluator: checkpoint step ' "$T/other.out" &&
        grep -qx "evaluator: passing over $(echo $have | wc -w) checkpoints in $R written before it started (up to step $final)" \
            "$T/other.out" &&
        grep -q "no new checkpoint in $R for 2 s after step $final, and the chief did not mark the run finished" \
            "$T/other.err" && ok "another job's marker: old checkpoints passed over, then the wait ends it" ||
        fail "other: $(cat "$T/other.err" "$T/other.out")"
fi
JOB=$(sed -n 's/^job \([0-9a-f]*\) .*/\1/p' "$R/finished")
E[2]=SLUICE_JOB_ID=$JOB
if run late 0 "${E[@]}" "$BIN/sluice-train" "$T/mlp.sl" --run-dir "$R" --timeout 2; then
    [ "$(tail -n 1 "$T/late.out")" = "evaluator: checkpoint step $final: $(eval_lines job | tail -n 1 | sed 's/.*: \(loss .*\)/\1/')" ] &&
        ok "started late, its own job's marker: the final checkpoint evaluated, exit 0" || fail "late: $(cat "$T/late.out")"
fi
# sluice-launch -n 1 --evaluator over strategy none: refused, nothing trained twice
if run none 1 "$BIN/sluice-launch" -n 1 --evaluator --port-base "$PB" --timeout 60 -- "$BIN/sluice-train" "$T/mlp.sl" \
    --set train.strategy=none --run-dir "$T/none"; then
    grep -q '^\[evaluator 0\] sluice-train: this task is the evaluator (SLUICE_TASK, from sluice-launch --evaluator) but the train block says strategy none' \
        "$T/none.err" && grep -q '^\[launch\] evaluator 0 exited with status 1: training goes on without it$' "$T/none.err" &&
        ok "strategy none: the evaluator refuses, the launcher exits with its status" || fail "none: $(cat "$T/none.err")"
fi
# 6. a worker that starts 3 s after the others (an async chief may be done by then): the ps
# waits for it (up to dead_after_s, 10 s, from its own start), so it joins, trains its shard
# and says BYE, and the job exits 0. The old ps ended at the chief's BYE, and the late
# worker's join went unanswered until the launcher's timeout.
printf '#!/bin/sh\n[ "$SLUICE_TASK" = "worker 1" ] && sleep 3\nexec "$@"\n' >"$T/late1.sh"
chmod +x "$T/late1.sh"
if run late1 0 "$BIN/sluice-launch" -n 2 --ps 1 --port-base "$PB" --timeout 60 -- "$T/late1.sh" "$BIN/sluice-train" \
    "$T/mlp.sl" --run-dir "$T/late1"; then
    grep -q '^\[worker 0\] test accuracy 0\.[0-9]\{4\}$' "$T/late1.out" &&
        ok "worker 1 started 3 s late: served by the ps, exit 0" || fail "late1: $(cat "$T/late1.out")"
fi
sl_finish
