#!/usr/bin/env bash
# --resume from the pipeline's position instead of replaying the epoch (`shuffle global`):
#   1. ten runs stopped at seeded random steps (a parallel, autotuned map and prefetch; some
#      stops mid-epoch, one on an epoch's last batch) and resumed: each says it started its
#      pipeline at the checkpoint's batch with nothing replayed, and its final checkpoint is
#      byte-identical to an uninterrupted run's;
#   2. the same with a buffer shuffle over the files: the resumed run replays nothing, says
#      how many records it read again to rebuild the buffer (about the buffer), and is
#      identical too;
#   3. elastic: a ring run that goes 2 -> 3 -> 2 replicas mid-epoch (global batch 60: 30, 20,
#      30 per replica) starts each leg's pipeline at the same global position, and ends within
#      0.5 points of the test accuracy of a run that stayed at 2 replicas; 4. the same with a
#      parameter server (mode=sync).
. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record sluice-launch
sl_require_fashion
sl_workdir resume
sl_convert_fashion 4 1200
PB=$((28026 + ($$ % 40) * 100))

map='map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255) parallel=auto'
# write_config FILE BATCH SHUFFLE-LINE
write_config() {
    {
        printf 'pipeline train {\n    files "data/train-*.tfrecord"\n    %s\n    %s\n' "$3" "$map"
        printf '    batch %s drop_remainder\n    prefetch auto\n}\n' "$2"
        printf 'pipeline test {\n    files "data/test-*.tfrecord"\n    %s\n    batch 100\n}\n' "$map"
        printf 'model tiny {\n    input 28x28x1\n    flatten\n    dense 32 activation=relu\n    dense 10\n}\n'
        printf 'train {\n    model tiny\n    data train\n    eval test every=1\n    epochs 3\n'
        printf '    optimizer sgd lr=0.05 momentum=0.9\n    checkpoint every=1 keep=2\n    backend cpu\n    threads 1\n    seed 1\n}\n'
    } >"$1"
}
write_config "$T/g.sl" 50 "shuffle global"
write_config "$T/b.sl" 50 "shuffle 300"
write_config "$T/e.sl" 60 "shuffle global"

# 1. ten stops: 1200 records, batch 50: 24 steps an epoch, 72 in all
run full 0 "$BIN/sluice-train" "$T/g.sl" --run-dir "$T/full" || sl_finish
stops=(23 24 $(( ($$ % 13) + 1 )))
RANDOM=$(( $$ % 1000 ))
while [ ${#stops[@]} -lt 10 ]; do
    s=$(( RANDOM % 70 + 1 ))
    [[ " ${stops[*]} " == *" $s "* ]] || stops+=("$s")
done
echo "stops: ${stops[*]}"
bad=0
for s in "${stops[@]}"; do
    d="$T/stop$s"
    rm -rf "$d"
    run "a$s" 0 "$BIN/sluice-train" "$T/g.sl" --run-dir "$d" --set train.steps="$s" || { bad=1; continue; }
    run "b$s" 0 "$BIN/sluice-train" "$T/g.sl" --run-dir "$d" --resume || { bad=1; continue; }
    e=$(( s / 24 + 1 )) b=$(( s % 24 ))
    if [ "$b" != 0 ] && ! grep -q "^resume: pipeline 'train' started at batch $b of epoch $e in [0-9.]* ms, nothing replayed$" "$T/b$s.out"; then
        fail "stop $s: no resume line for batch $b of epoch $e: $(grep -m2 resum "$T/b$s.out")"; bad=1
    fi
    cmp -s "$d/ckpt-000000072.safetensors" "$T/full/ckpt-000000072.safetensors" ||
        { fail "stop at step $s: the final checkpoint differs from the uninterrupted run's"; bad=1; }
done
[ "$bad" = 0 ] && ok "10 runs stopped at steps ${stops[*]} and resumed from the pipeline state: final checkpoints identical"

# 2. a buffer shuffle starts part-way too: its draws replayed on positions, only the records
#    in its buffer read again (the files before them skipped through their indexes)
run bfull 0 "$BIN/sluice-train" "$T/b.sl" --run-dir "$T/bfull" &&
    run bstop 0 "$BIN/sluice-train" "$T/b.sl" --run-dir "$T/bres" --set train.steps=30 &&
    run bres 0 "$BIN/sluice-train" "$T/b.sl" --run-dir "$T/bres" --resume &&
    grep -q "^resume: pipeline 'train' started at batch 6 of epoch 2 in [0-9.]* ms, nothing replayed ([0-9]* elements read again to rebuild its shuffle buffer)$" "$T/bres.out" &&
    echo "bres: $(grep -m1 "^resume:" "$T/bres.out")" &&
    n=$(sed -n 's/.*nothing replayed (\([0-9]*\) elements.*/\1/p' "$T/bres.out") &&
    [ "$n" -ge 1 ] && [ "$n" -le 600 ] &&
    cmp -s "$T/bres/ckpt-000000072.safetensors" "$T/bfull/ckpt-000000072.safetensors" &&
    ok "buffer shuffle: resumed at batch 6, nothing replayed, $n records read again for its buffer of 300, final checkpoint identical" ||
    fail "buffer shuffle resume: $(grep -m2 resum "$T/bres.out")"

# 3. elastic: 2 -> 3 -> 2 replicas (20 steps an epoch), against 2 throughout
STRAT=(--set train.strategy=ring) PS=()
launch_train() { # NAME N ARGS...: sluice-launch -n N [--ps 1] sluice-train e.sl STRATEGY ARGS
    local name=$1 n=$2
    shift 2
    run "$name" 0 "$BIN/sluice-launch" -n "$n" "${PS[@]}" --port-base "$PB" -- "$BIN/sluice-train" "$T/e.sl" \
        "${STRAT[@]}" "$@"
}
elastic() { # WHAT: 2 -> 3 -> 2 against 2 throughout
    rm -rf "$T/e2" "$T/el"
    if launch_train e2 2 --run-dir "$T/e2" && launch_train l1 2 --run-dir "$T/el" --set train.steps=26 &&
        launch_train l2 3 --run-dir "$T/el" --set train.steps=47 --resume && launch_train l3 2 --run-dir "$T/el" --resume; then
        grep -q "^\[worker 0\] resume: pipeline 'train' started at batch 6 of epoch 2 in .* ms, nothing replayed$" "$T/l2.out" &&
            grep -q "^\[worker 0\] resume: pipeline 'train' started at batch 7 of epoch 3 in .* ms, nothing replayed$" "$T/l3.out" &&
            ok "$1: 2 -> 3 -> 2 replicas, each leg starts at the global position (batch 6 of epoch 2, batch 7 of epoch 3)" ||
            fail "$1: elastic resume lines: $(grep resume "$T/l2.out" "$T/l3.out")"
        a=$(sed -n 's/^\[worker 0\] test accuracy //p' "$T/e2.out") z=$(sed -n 's/^\[worker 0\] test accuracy //p' "$T/l3.out")
        if [ -n "$a" ] && [ -n "$z" ] && awk -v a="$a" -v z="$z" 'BEGIN { d = a - z; exit !(d < 0.005 && d > -0.005) }'; then
            ok "$1: the resized run's test accuracy $z, unresized $a"
        else
            fail "$1: resized run's accuracy '$z' vs unresized '$a'"
        fi
    fi
}
elastic ring
STRAT=(--set train.strategy=ps --set train.strategy.mode=sync) PS=(--ps 1)
elastic "ps mode=sync"
sl_finish
