#!/usr/bin/env bash
# The README's --set spellings on examples/fashion_mlp.sl as it ships, on a --limit'ed
# Fashion-MNIST conversion: switching the run from epochs to steps by removing `epochs`
# (PATH=-) and either replacing the checkpoint statement's arguments (PATH=(ARGS...)) or
# removing its every= and adding steps= gives 60 steps with checkpoints at 20, 40 and 60
# (before PATH=-, `--set train.checkpoint.steps=20` alone was refused: "give every=EPOCHS
# or steps=N, not both"); removing something that is not there is a usage error (exit 2)
# naming it, with a did-you-mean. A few seconds.
set -u
SRC=${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record
sl_require_fashion
sl_workdir set
sl_convert_fashion 2 2000
data=(--set "pipeline.train.files=\"$T/data/train-*.tfrecord\"" --set "pipeline.test.files=\"$T/data/test-*.tfrecord\""
      --set train.threads=1)

check_steps() { # NAME RUN_DIR: 60 steps, the last line, checkpoints at 20/40/60 (keep=3)
    local name=$1 dir=$2
    grep -q ' 60 steps; ' "$T/$name.out" && grep -q '^epoch [0-9]*  step 60  ' "$T/$name.out" &&
        [[ "$(tail -n 1 "$T/$name.out")" =~ ^test\ accuracy\ 0\.[0-9]{4}$ ]] &&
        ok "$name: 60 steps, then the test accuracy" || fail "$name: $(tail -n 3 "$T/$name.out")"
    [ "$(cd "$dir" && ls ckpt-*.safetensors | tr '\n' ' ')" = \
        "ckpt-000000020.safetensors ckpt-000000040.safetensors ckpt-000000060.safetensors " ] &&
        ok "$name: checkpoints at steps 20, 40, 60" || fail "$name: checkpoints $(ls "$dir")"
}

cd "$T"
# what used to fail: every=1 stays and steps=20 joins it
run both 1 "$BIN/sluice-train" "$SRC/examples/fashion_mlp.sl" "${data[@]}" --set train.steps=60 \
    --set train.checkpoint.steps=20 --set train.run_dir=\"$T/both\" &&
    grep -q 'checkpoint: give every=EPOCHS or steps=N, not both' "$T/both.err" &&
    ok "every= and steps= together still refused" || fail "both: $(cat "$T/both.err")"

if run args 0 "$BIN/sluice-train" "$SRC/examples/fashion_mlp.sl" "${data[@]}" --set train.epochs=- \
    --set train.steps=60 --set 'train.checkpoint=(steps=20 keep=3)' --set train.run_dir=\"$T/args\"; then
    check_steps args "$T/args"
fi
if run remove 0 "$BIN/sluice-train" "$SRC/examples/fashion_mlp.sl" "${data[@]}" --set train.epochs=- \
    --set train.steps=60 --set train.checkpoint.every=- --set train.checkpoint.steps=20 --set train.run_dir=\"$T/remove\"; then
    check_steps remove "$T/remove"
fi

run typo 2 "$BIN/sluice-train" "$SRC/examples/fashion_mlp.sl" --set train.epoch=- &&
    grep -qx "sluice-train: --set: override 'train.epoch=-': nothing named 'epoch' in train to remove" "$T/typo.err" &&
    grep -qx -- "---> HINT: did you mean 'epochs'?" "$T/typo.err" &&
    ok "removing what is not there: exit 2, named, did-you-mean" || fail "typo: $(cat "$T/typo.err")"
run unclosed 2 "$BIN/sluice-train" "$SRC/examples/fashion_mlp.sl" --set 'train.checkpoint=(steps=20' &&
    grep -q "override 'train.checkpoint': --set:1:1: this '(' is never closed" "$T/unclosed.err" &&
    ok "an unclosed (ARGS: exit 2, named" || fail "unclosed: $(cat "$T/unclosed.err")"

[ "$fails" = 0 ] || exit 1
