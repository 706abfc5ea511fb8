#!/usr/bin/env bash
# sluice-train end to end on a --limit'ed Fashion-MNIST conversion with a tiny model: two
# epochs exit 0 and the last line is `test accuracy 0.XXXX`; checkpoints land in the run
# folder and TensorBoard event files in its train/ and eval/ (same tags on the same steps,
# read back); --set changes the number of epochs; --resume of a finished run starts at its
# last step (and adds a new event file in train/ and eval/); usage mistakes exit 2; config
# mistakes exit 1 with file:line:col and a hint; the shipped examples (model, pipelines, train block) run 2
# steps on the small conversion. Damaged checkpoints: zeroed tensor bytes in the newest are
# caught by its checksums and --resume takes the older good one (naming the damaged one),
# none loadable exits 1 naming them, a FIFO named like a checkpoint is refused at once; a
# new run refuses a folder that holds another run's files unless --overwrite. --summary
# prints the model's summary (with Keras' "Connected to" for a graph) and trains nothing.
# On a terminal (script(1)'s pty) the progress bar is drawn with ESC[K, and with TERM=dumb
# without any escape sequence; a model that cannot fit in memory exits 1 at start naming
# both sizes; Ctrl-C prints the command as given (options in any order) with --resume, and
# that command, run as printed, resumes at the stopped step.
set -u

SRC=${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record
sl_require_fashion
sl_workdir train
sl_convert_fashion 2 1000

sl_tiny_fashion_config "$T/tiny.sl" "" "epochs 2" "optimizer sgd lr=0.05 momentum=0.9" "schedule cosine" \
    "checkpoint every=1 keep=5" 'run_dir "runs/tiny"'

# 1. two epochs: exit 0, one line per epoch, last line the test accuracy
if run train2 0 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/run"; then
    last=$(tail -n 1 "$T/train2.out")
    if [[ "$last" =~ ^test\ accuracy\ 0\.[0-9]{4}$ ]]; then ok "2 epochs: $last"; else fail "last line '$last'"; fi
    n=$(grep -c '^epoch [0-9]*/2 ' "$T/train2.out")
    [ "$n" = 2 ] && ok "2 epoch lines" || fail "$n epoch lines, expected 2"
    # 10 classes: top-5 accuracy beside accuracy, for training and the evaluation
    grep -q '^epoch 2/2  step 40  loss [0-9.]*  accuracy 0\.[0-9]*  top5 [01]\.[0-9]*  [0-9]* examples/s  input wait [0-9.]*%  lr .*  eval accuracy 0\.[0-9]*  eval top5 [01]\.[0-9]*' "$T/train2.out" &&
        ok "epoch line fields" || fail "epoch line: $(grep '^epoch 2/2' "$T/train2.out")"
    ls "$T/run"/ckpt-000000020.safetensors "$T/run"/ckpt-000000040.safetensors >/dev/null 2>&1 &&
        ok "checkpoints at steps 20 and 40" || fail "checkpoints: $(ls "$T/run")"
    ls "$T/run"/train/events.out.tfevents.* "$T/run"/eval/events.out.tfevents.* >/dev/null 2>&1 &&
        ! ls "$T/run"/events.out.tfevents.* >/dev/null 2>&1 && ok "event files in train/ and eval/, none at the top" ||
        fail "event files: $(ls -R "$T/run")"
    # the two TensorBoard runs read back: the same tags on the same steps; the final eval is
    # the printed test accuracy
    DUMP=${SLUICE_TESTS_BIN:-build/tests}/test_tfevents
    if [ -x "$DUMP" ]; then
        tr_tags=$("$DUMP" --dump "$T/run"/train/events.out.tfevents.* | awk '$1 == "scalar" {printf "%s %s;", $3, $4}')
        ev_tags=$("$DUMP" --dump "$T/run"/eval/events.out.tfevents.* | awk '$1 == "scalar" {printf "%s %s;", $3, $4}')
        want_tr="20 loss;20 accuracy;20 learning_rate;20 examples_per_sec;20 input_wait_fraction;20 top5_accuracy;"
        want_tr="$want_tr${want_tr//20/40}"
        [ "$tr_tags" = "$want_tr" ] && ok "train/: loss, accuracy, ..., top5_accuracy at steps 20 and 40" ||
            fail "train/ scalars: '$tr_tags'"
        [ "$ev_tags" = "20 accuracy;20 loss;20 top5_accuracy;40 accuracy;40 loss;40 top5_accuracy;" ] &&
            ok "eval/: accuracy, loss, top5_accuracy at steps 20 and 40" ||
            fail "eval/ scalars: '$ev_tags'"
        acc=$("$DUMP" --dump "$T/run"/eval/events.out.tfevents.* | awk '$1 == "scalar" && $3 == 40 && $4 == "accuracy" {printf "%.4f", $5}')
        [ "test accuracy $acc" = "$last" ] && ok "eval/ accuracy at step 40 = $last" || fail "eval/ accuracy $acc vs '$last'"
    fi
    grep -q '"format": "sluice-stats"' "$T/run/stats.json" 2>/dev/null && ok "pipeline stats file" ||
        fail "no stats.json: $(ls "$T/run")"
    if [ -x "$BIN/sluice-stats" ]; then
        run stats 0 "$BIN/sluice-stats" --from "$T/run/stats.json" && grep -q "train/map_batch\|train/batch" "$T/stats.out" &&
            ok "sluice-stats --from reads it" || fail "sluice-stats --from: $(head -5 "$T/stats.out")"
    fi
fi

# 2. --set changes the number of epochs (and the run folder comes from the config, relative to the cwd)
if (cd "$T" && run set1 0 "$BIN/sluice-train" tiny.sl --set train.epochs=1 --quiet); then
    n=$(wc -l <"$T/set1.out")
    if [ "$n" = 1 ] && grep -qE '^test accuracy 0\.[0-9]{4}$' "$T/set1.out"; then ok "--quiet prints only the result"; else
        fail "--quiet printed: $(cat "$T/set1.out")"; fi
    [ -f "$T/runs/tiny/ckpt-000000020.safetensors" ] && [ ! -f "$T/runs/tiny/ckpt-000000040.safetensors" ] &&
        ok "--set train.epochs=1: 20 steps, run_dir relative to the cwd" || fail "--set epochs: $(ls "$T/runs/tiny" 2>&1)"
fi
if run steps 0 "$BIN/sluice-train" "$T/tiny.sl" --set train.steps=7 --run-dir "$T/run7"; then
    grep -q '^epoch 1  step 7 ' "$T/steps.out" && [ -f "$T/run7/ckpt-000000007.safetensors" ] &&
        ok "--set train.steps=7: a partial epoch and a final checkpoint" || fail "steps 7: $(cat "$T/steps.out")"
fi

# 3. --resume of the finished 2-epoch run with one more epoch continues at step 40
if run resume 0 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/run" --resume --set train.epochs=3; then
    grep -q "^resuming from $T/run/ckpt-000000040.safetensors at step 40 (epoch 3, batch 0)$" "$T/resume.out" &&
        grep -q '^epoch 3/3  step 60 ' "$T/resume.out" && ok "--resume continues at step 40" ||
        fail "resume: $(cat "$T/resume.out")"
    [ "$(ls "$T/run"/train/events.out.tfevents.* | wc -l)" = 2 ] && [ "$(ls "$T/run"/eval/events.out.tfevents.* | wc -l)" = 2 ] &&
        ok "--resume: a new event file in train/ and in eval/" || fail "resume event files: $(ls -R "$T/run")"
fi

# 3b. the newest checkpoint's tensor bytes zeroed (a damaged disk or copy): --resume skips it
#     with a warning naming it and takes the older good one; it never trains on from zeros
zero_tensors() { # FILE: zero everything after the header
    local hl size
    hl=$(od -An -tu8 -N8 "$1" | tr -d ' ')
    size=$(stat -c %s "$1")
    # one write of the whole span at byte offset 8 + hl (bs=1 made it 200,000 writes, 0.5 s)
    dd if=/dev/zero of="$1" bs=$((size - 8 - hl)) count=1 seek=$((8 + hl)) oflag=seek_bytes conv=notrunc status=none
}
if [ -f "$T/run/ckpt-000000060.safetensors" ]; then
    zero_tensors "$T/run/ckpt-000000060.safetensors"
    if run zeroed 0 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/run" --resume --set train.epochs=4; then
        grep -q "^warning: skipping damaged checkpoint $T/run/ckpt-000000060.safetensors: checkpoint $T/run/ckpt-000000060.safetensors: byte [0-9]*: tensor \".*\" .* does not match its checksum" "$T/zeroed.err" &&
            ok "zeroed tensors: skipped with a warning naming the file" || fail "zeroed: no warning: $(cat "$T/zeroed.err")"
        grep -q "^resuming from $T/run/ckpt-000000040.safetensors at step 40 (epoch 3, batch 0)$" "$T/zeroed.out" &&
            grep -q '^epoch 4/4  step 80 ' "$T/zeroed.out" && ok "zeroed newest: resumed from the older good checkpoint" ||
            fail "zeroed: $(cat "$T/zeroed.out")"
        acc=$(tail -n 1 "$T/zeroed.out" | sed -n 's/^test accuracy //p')
        [ -n "$acc" ] && [ "$acc" != 0.1000 ] && ok "zeroed newest: test accuracy $acc" || fail "zeroed: last line $(tail -n 1 "$T/zeroed.out")"
    fi
    # every checkpoint damaged: exit 1 naming them
    mkdir -p "$T/alldmg"
    for f in "$T/run"/ckpt-*.safetensors; do cp "$f" "$T/alldmg/" && zero_tensors "$T/alldmg/$(basename "$f")"; done
    n=$(ls "$T/alldmg" | wc -l)
    if run alldmg 1 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/alldmg" --resume; then
        grep -q "sluice-train: --resume: none of the $n checkpoints in $T/alldmg is loadable: $T/alldmg/ckpt-" "$T/alldmg.err" &&
            ok "no loadable checkpoint: exit 1 naming them" || fail "alldmg: $(cat "$T/alldmg.err")"
        grep -q "test accuracy" "$T/alldmg.out" && fail "alldmg printed an accuracy" || ok "no loadable checkpoint: no accuracy"
    fi
    # a FIFO named like the newest checkpoint: refused at once, not a hang
    mkdir -p "$T/fifo" && cp "$T/run/ckpt-000000040.safetensors" "$T/fifo/" && mkfifo "$T/fifo/ckpt-000000999.safetensors"
    if run fifo 0 timeout 120 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/fifo" --resume --set train.epochs=3; then
        grep -q "^warning: skipping damaged checkpoint $T/fifo/ckpt-000000999.safetensors: safetensors file '$T/fifo/ckpt-000000999.safetensors': is a FIFO (named pipe), not a regular file" "$T/fifo.err" &&
            grep -q "^resuming from $T/fifo/ckpt-000000040.safetensors at step 40 " "$T/fifo.out" &&
            ok "a FIFO named ckpt-*: skipped at once" || fail "fifo: $(cat "$T/fifo.err" "$T/fifo.out")"
    fi
fi

# 3c. a new run into a folder of another run: refused (nothing removed); --overwrite replaces it
if [ -f "$T/run/ckpt-000000040.safetensors" ]; then
    if run reuse 1 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/run" --set train.epochs=1; then
        grep -q "sluice-train: run folder $T/run holds another run's files: [0-9]* checkpoints (newest ckpt-0000000[0-9]*.safetensors), [0-9]* TensorBoard event files" "$T/reuse.err" &&
            grep -q "HINT: continue that run with --resume, replace it with --overwrite" "$T/reuse.err" &&
            ok "a new run into a used folder: exit 1 naming it" || fail "reuse: $(cat "$T/reuse.err")"
        [ -f "$T/run/ckpt-000000080.safetensors" ] && ok "the refused run removed nothing" || fail "reuse removed files: $(ls "$T/run")"
    fi
    if run overwrite 0 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/run" --set train.epochs=1 --overwrite; then
        grep -q "^run folder $T/run: removing an earlier run's " "$T/overwrite.out" &&
            [ "$(ls "$T/run"/ckpt-*.safetensors)" = "$T/run/ckpt-000000020.safetensors" ] &&
            [ "$(ls "$T/run"/train/events.out.tfevents.* | wc -l)" = 1 ] &&
            [ "$(ls "$T/run"/eval/events.out.tfevents.* | wc -l)" = 1 ] &&
            ok "--overwrite: the earlier run's checkpoints and event files removed" || fail "overwrite: $(ls "$T/run")"
    fi
    run both 2 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/run" --resume --overwrite && ok "--resume --overwrite: exit 2"
fi

# 3c'. the progress bar on a terminal (a pty from script(1)): redrawn after ESC[K, and with
#      TERM=dumb after a carriage return and blanks, with no escape sequence at all
if command -v script >/dev/null; then
    for term in xterm dumb; do
        TERM=$term script -qec "'$BIN/sluice-train' '$T/tiny.sl' --run-dir '$T/tty-$term' --set train.epochs=1" \
            /dev/null >"$T/tty-$term.out" 2>&1 </dev/null
    done
    esc=$(printf '\033')
    bar='epoch 1(/1 \[=> *\] 1/[0-9]+|  batch 1)  loss '
    grep -qE "$esc\[K$bar" "$T/tty-xterm.out" && ok "progress bar on a terminal: ESC[K" ||
        fail "TERM=xterm: no ESC[K bar: $(head -c 300 "$T/tty-xterm.out" | cat -A)"
    if grep -q "$esc" "$T/tty-dumb.out"; then fail "TERM=dumb: an escape sequence: $(head -c 300 "$T/tty-dumb.out" | cat -A)"
    elif grep -qE "$bar" "$T/tty-dumb.out"; then ok "TERM=dumb: the bar without escape sequences"
    else fail "TERM=dumb: no bar: $(head -c 300 "$T/tty-dumb.out" | cat -A)"; fi
else
    echo "  (no script(1): the terminal checks are not run)"
fi

# 3c''. a model that cannot fit in memory (2^48 parameters: no machine has the petabyte) is
#       refused at start with both sizes and its largest layer, before anything is allocated
#       (a model past the memory grew until the OOM killer ended the run, exit 137)
sed 's/dense 32 activation=relu/dense 16777216 activation=relu\n    dense 16777216 activation=relu/' "$T/tiny.sl" >"$T/huge.sl"
if run huge 1 timeout 60 "$BIN/sluice-train" "$T/huge.sl" --run-dir "$T/runhuge"; then
    grep -q "^sluice-train: model: needs .* of memory (281488331374602 parameters: 1.0 PiB, .*), more than the .* this process can still take (" "$T/huge.err" &&
        grep -q "^---> HINT: the largest layer is dense_2 with 281474993487872 parameters" "$T/huge.err" &&
        ok "a model past the memory: exit 1 at start, both sizes named" || fail "huge model: $(cat "$T/huge.err")"
fi

# 3d. Ctrl-C: SIGINT after the first epoch line stops at the next step with a checkpoint of
#     that step, the command that resumes it, and exit 130; that command continues from that
#     step. SIGTERM: the same, exit 143. Checkpoints off: stopped cleanly, "nothing was saved".
# start_bg NAME CMD...: run CMD in the background with output in $T/NAME.{out,err}; BG_PID
start_bg() {
    local name=$1
    shift
    "$@" >"$T/$name.out" 2>"$T/$name.err" &
    BG_PID=$!
}
# signal_after_epoch NAME SIG: once $T/NAME.out has an epoch line (bounded: 60 s), send SIG
# to BG_PID and wait for it (bounded: 60 s more); BG_RC its exit status
signal_after_epoch() {
    local i
    for ((i = 0; i < 600; i++)); do
        grep -q '^epoch ' "$T/$1.out" 2>/dev/null && break
        sleep 0.1
    done
    kill -s "$2" "$BG_PID"
    for ((i = 0; i < 600; i++)); do
        kill -0 "$BG_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$BG_PID" 2>/dev/null && { kill -9 "$BG_PID"; fail "$1: still running 60 s after SIG$2"; }
    wait "$BG_PID"
    BG_RC=$?
}
# --set before --run-dir: the resume hint is the command as given (the argument list is
# parsed in place; the hint once lost the first --set and repeated --run-dir)
start_bg int "$BIN/sluice-train" "$T/tiny.sl" --set train.epochs=500 --run-dir "$T/runint"
signal_after_epoch int INT
[ "$BG_RC" = 130 ] && ok "SIGINT: exit 130" || fail "SIGINT: exit $BG_RC: $(cat "$T/int.err")"
stopped=$(sed -n 's/^sluice-train: stopped by SIGINT (Ctrl-C) at step \([0-9]*\); saved checkpoint .*/\1/p' "$T/int.err")
ck=$(printf '%s/ckpt-%09d.safetensors' "$T/runint" "${stopped:-0}")
if [ -n "$stopped" ] && [ "$stopped" -ge 20 ] && [ "$stopped" -lt 10000 ] &&
    grep -qx "sluice-train: stopped by SIGINT (Ctrl-C) at step $stopped; saved checkpoint $ck" "$T/int.err" && [ -f "$ck" ]; then
    ok "SIGINT: checkpoint of the stopped step $stopped"
else
    fail "SIGINT: $(cat "$T/int.err"; ls "$T/runint")"
fi
grep -qx -- "---> HINT: resume with: sluice-train $T/tiny.sl --set train.epochs=500 --run-dir $T/runint --resume" "$T/int.err" &&
    ok "SIGINT: the resume command" || fail "SIGINT hint: $(cat "$T/int.err")"
grep -qx "stop requested: stopping at step $stopped" "$T/int.out" && ! grep -q "test accuracy" "$T/int.out" &&
    ok "SIGINT: stop line, no final evaluation" || fail "SIGINT out: $(tail -3 "$T/int.out")"
# the printed command resumes at that step (and a SIGTERM stops it again: exit 143)
if [ -n "$stopped" ]; then
    ep=$((stopped / 20 + 1)) bt=$((stopped % 20))
    # the hint's words, run as the shell would (they are shell-quoted), with this build's tool
    hint=$(sed -n 's/^---> HINT: resume with: sluice-train //p' "$T/int.err")
    eval "words=($hint)"
    start_bg int2 "$BIN/sluice-train" "${words[@]}"
    signal_after_epoch int2 TERM
    grep -qx "resuming from $ck at step $stopped (epoch $ep, batch $bt)" "$T/int2.out" &&
        ok "--resume continues at the stopped step $stopped" || fail "resume after SIGINT: $(head -3 "$T/int2.out")"
    [ "$BG_RC" = 143 ] && grep -q "^sluice-train: stopped by SIGTERM at step [0-9]*; saved checkpoint " "$T/int2.err" &&
        ok "SIGTERM: exit 143 with a checkpoint" || fail "SIGTERM: exit $BG_RC: $(cat "$T/int2.err")"
fi
sed 's/^    checkpoint every=1 keep=5$/    checkpoint none/' "$T/tiny.sl" >"$T/nockpt.sl"
start_bg nock "$BIN/sluice-train" "$T/nockpt.sl" --run-dir "$T/runnock" --set train.epochs=500
signal_after_epoch nock INT
[ "$BG_RC" = 130 ] && grep -q "^sluice-train: stopped by SIGINT (Ctrl-C) at step [0-9]*; checkpoints are off (\`checkpoint none\`): nothing was saved$" "$T/nock.err" &&
    ! ls "$T/runnock"/ckpt-* >/dev/null 2>&1 && ok "SIGINT without checkpoints: exit 130, nothing saved, said so" ||
    fail "SIGINT no checkpoints: exit $BG_RC: $(cat "$T/nock.err")"

# 4. usage mistakes exit 2
run usage0 2 "$BIN/sluice-train" && grep -q "missing CONFIG" "$T/usage0.err" && ok "no CONFIG: exit 2"
run usage1 2 "$BIN/sluice-train" "$T/tiny.sl" --bogus && ok "unknown option: exit 2"
run usage2 2 "$BIN/sluice-train" "$T/tiny.sl" --backend tpu && grep -q "cpu, cuda or auto" "$T/usage2.err" &&
    ok "--backend tpu: exit 2"
run usage3 2 "$BIN/sluice-train" "$T/tiny.sl" --set nothing.here=1 && ok "--set to nowhere: exit 2"
run help 0 "$BIN/sluice-train" --help && grep -q "^Usage: sluice-train CONFIG" "$T/help.out" && ok "--help: exit 0"

# 5. config mistakes exit 1 with file:line:col and a hint
sed 's/^    epochs 2$/    epohcs 2/' "$T/tiny.sl" >"$T/bad1.sl"
if run bad1 1 "$BIN/sluice-train" "$T/bad1.sl" --run-dir "$T/bad"; then
    grep -q "bad1.sl:22:5: unknown train statement 'epohcs'" "$T/bad1.err" && grep -q "HINT: did you mean 'epochs'" "$T/bad1.err" &&
        ok "unknown statement: exit 1 at file:line:col with a hint" || fail "bad1: $(cat "$T/bad1.err")"
fi
sed 's/^    dense 32 activation=relu$/    dense 32 activation=relux/' "$T/tiny.sl" >"$T/bad2.sl"
if run bad2 1 "$BIN/sluice-train" "$T/bad2.sl" --run-dir "$T/bad"; then
    grep -q "bad2.sl:15:" "$T/bad2.err" && ok "model mistake: exit 1 at file:line" || fail "bad2: $(cat "$T/bad2.err")"
fi
sed '2s|"data/train-\*.tfrecord"|"nothing-*.tfrecord"|' "$T/tiny.sl" >"$T/bad3.sl"
if run bad3 1 "$BIN/sluice-train" "$T/bad3.sl" --run-dir "$T/bad"; then
    grep -q "bad3.sl:2:" "$T/bad3.err" && ok "missing files: exit 1 at file:line" || fail "bad3: $(cat "$T/bad3.err")"
fi
run missing 1 "$BIN/sluice-train" "$T/none.sl" && ok "missing config file: exit 1"

# 6. the shipped examples run (their data paths pointed at the small conversion)
for ex in fashion_mlp fashion_cnn; do
    mkdir -p "$T/exdir" && cp "$SRC/examples/$ex.sl" "$T/exdir/$ex.sl"
    if run "$ex" 0 "$BIN/sluice-train" "$T/exdir/$ex.sl" --run-dir "$T/run-$ex" --set train.steps=2 \
        --set 'pipeline.train.files="../data/train-*.tfrecord"' --set 'pipeline.test.files="../data/test-*.tfrecord"' \
        --set pipeline.test.batch=100 --set train.backend=cpu; then
        tail -n 1 "$T/$ex.out" | grep -qE '^test accuracy 0\.[0-9]{4}$' && ok "examples/$ex.sl: 2 steps" ||
            fail "$ex: $(tail -n 3 "$T/$ex.out")"
    fi
done

# 7. --summary prints the model's summary and trains nothing; a graph model's names the
# layers each reads
if run summary 0 "$BIN/sluice-train" "$T/tiny.sl" --summary --run-dir "$T/run-summary"; then
    want='model tiny
Layer (type)                       Output Shape              Param #
input (InputLayer)                 (None, 28, 28, 1)               0
flatten_1 (Flatten)                (None, 784)                     0
dense_1 (Dense)                    (None, 32)                  25120
dense_2 (Dense)                    (None, 10)                    330
Total params: 25450 (trainable 25450)'
    [ "$(cat "$T/summary.out")" = "$want" ] && [ ! -e "$T/run-summary" ] && ok "--summary: the table, no run" ||
        fail "--summary: $(cat "$T/summary.out")"
fi
if run summary-graph 0 "$BIN/sluice-train" "$SRC/examples/fashion_resnet.sl" --summary; then
    grep -q '^add_1 (Add)  *(None, 28, 28, 16)  *0  batch_normalization_3, relu_1$' "$T/summary-graph.out" &&
        grep -q '^Total params: 83146 (trainable 82602)$' "$T/summary-graph.out" &&
        ok "--summary of examples/fashion_resnet.sl: Connected to" ||
        fail "graph summary: $(head -5 "$T/summary-graph.out")"
fi
printf 'model m {\n    input 4\n    dense 3 activation=relu\n}\ntrain {\n    model m\n}\n' >"$T/badmodel.sl"
run summary-bad 1 "$BIN/sluice-train" "$T/badmodel.sl" --summary &&
    ok "--summary of a config with a broken train block: exit 1"

if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "PASS: test_sluice_train"
