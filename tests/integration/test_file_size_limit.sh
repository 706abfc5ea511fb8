#!/usr/bin/env bash
# A file-size limit (`ulimit -f`, bash's blocks of 1024 bytes) is a write error like a full
# disk in every tool: the tools ignore SIGXFSZ themselves (at its default action the kernel
# kills the process at the limit, exit 153), so here nothing traps it. Each tool writes past
# the limit and must exit 1 naming the file, the byte offset (the limit) and a hint naming
# the limit, leave no temporary file, and keep what was there before:
#   1. sluice-record convert: no shard and no temporary shard left in the output folder;
#   2. sluice-train writing a checkpoint (a resumed run): the older checkpoint kept as it
#      was, no ckpt-*.safetensors.tmp.* left; sluice-record cat into a file;
#   3. sluice-stats --save (the older stats file kept, no .tmp), --trace (no cut-off trace
#      left), --html, and standard output redirected to a file;
#   4. a ps task (sluice-launch --ps 1) writing its shard: not killed; it names the shard,
#      leaves no temporary file and exits 1 after the workers finish;
#   5. sluice-launch --keygen: no key file or temporary file left, an older pair kept;
#   6. sluice-train --hash-log with two ring replicas: the run fails naming the log (a log
#      cut short would pass for replicas that agree up to where it ends).
# Tiny data and model (500 records, 25,450 parameters): a few seconds in all.
set -u

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record sluice-stats sluice-launch
sl_require_fashion
sl_workdir fsize
sl_kill_on_exit TERM
PB=$(sl_port_base 28024)

# limited BLOCKS CMD...: CMD under `ulimit -f BLOCKS`, started with SIGXFSZ at its default
# action even when whatever ran this script ignored it (an ignored signal is inherited, and
# bash cannot reset one it found ignored): the tools must ignore it themselves
dfl=(env --default-signal=XFSZ)
"${dfl[@]}" true 2>/dev/null || dfl=()
limited() { (ulimit -f "$1" && shift && exec "${dfl[@]}" "$@"); }
hint() { echo "HINT: a file-size limit (ulimit -f) stops writes past $1 bytes"; }
# has NAME TEXT WHAT: ok WHAT when $T/NAME.err holds TEXT (a fixed string), else fail showing it
has() {
    if grep -qF -- "$2" "$T/$1.err"; then ok "$3"; else fail_show "$3: no '$2' in" "$T/$1.err"; fi
}
no_tmp() {
    local left
    left=$(find "$1" -name "$2" | head -5)
    if [ -z "$left" ]; then ok "$3"; else fail "$3: left $left"; fi
}

# 1. sluice-record convert: each shard is 419,000 bytes, over 100 blocks
mkdir "$T/conv"
if run convert 1 limited 100 "$BIN/sluice-record" convert fashion-mnist "$T/conv" --shards 1 --limit 500; then
    ok "sluice-record convert past the limit: exit 1"
    has convert ".train-00000-of-00001.tfrecord.tmp" "the message names the shard"
    has convert "write failed at byte 102400: File too large" "at the limit's byte"
    has convert "$(hint 102400)" "the hint names the limit"
fi
left=$(ls -A "$T/conv")
if [ -z "$left" ]; then ok "no shard or temporary file left"; else fail "convert left: $left"; fi

# 2. sluice-train: a checkpoint (204,488 bytes) past 100 blocks, an older one present
sl_convert_fashion 1 500
cd "$T" || exit 1
sl_tiny_fashion_config "$T/c.sl" "" "epochs 2" "checkpoint every=1 keep=1"
if run train1 0 "$BIN/sluice-train" "$T/c.sl" --run-dir "$T/run" --set train.epochs=1 -q; then
    cp "$T/run/ckpt-000000010.safetensors" "$T/old.safetensors"
    if run train2 1 limited 100 "$BIN/sluice-train" "$T/c.sl" --run-dir "$T/run" --resume -q; then
        ok "sluice-train writing a checkpoint past the limit: exit 1"
        has train2 "sluice-train: $T/run/ckpt-000000020.safetensors: write failed at byte 102400: File too large" \
            "the message names the checkpoint and the byte"
        has train2 "$(hint 102400)" "the hint names the limit"
    fi
    no_tmp "$T/run" "*.tmp*" "no temporary checkpoint left"
    if cmp -s "$T/old.safetensors" "$T/run/ckpt-000000010.safetensors"; then ok "the older checkpoint is kept as it was"
    else fail "the older checkpoint changed or is gone: $(ls "$T/run")"; fi
    [ ! -e "$T/run/ckpt-000000020.safetensors" ] || fail "a checkpoint of step 20 is there"
fi

# 2b. sluice-record cat > FILE: one message, with the reason and the hint
if run cat 1 limited 1 "$BIN/sluice-record" cat "$T/data/train-00000-of-00001.tfrecord"; then
    ok "sluice-record cat > FILE past the limit: exit 1"
    if [ "$(cat "$T/cat.err")" = "sluice-record: writing to standard output failed: File too large
---> $(hint 1024): raise it (ulimit -f unlimited) or write less" ]; then ok "one message: the reason and the hint"
    else fail_show "sluice-record cat: not the one message with the reason and the hint" "$T/cat.err"; fi
fi

# 3. sluice-stats --save, --trace and --html past 1 block
if run stats0 0 "$BIN/sluice-stats" "$T/c.sl" -p train --batches 5 --save "$T/s.json"; then
    size=$(stat -c %s "$T/s.json")
    [ "$size" -gt 1024 ] || fail "the stats file has $size bytes, not more than the limit"
    cp "$T/s.json" "$T/s.old"
    if run save 1 limited 1 "$BIN/sluice-stats" "$T/c.sl" -p train --batches 5 --save "$T/s.json"; then
        ok "sluice-stats --save past the limit: exit 1"
        has save "$T/s.json: cannot write stats: File too large (write failed at byte 1024)" "names the file and the byte"
        has save "$(hint 1024)" "the hint names the limit"
    fi
    if cmp -s "$T/s.old" "$T/s.json" && [ ! -e "$T/s.json.tmp" ]; then ok "--save: the older file kept, no .tmp"
    else fail "--save left $(ls "$T"/s.json*)"; fi
    if run html 1 limited 1 "$BIN/sluice-stats" --from "$T/s.old" --html "$T/p.html"; then
        ok "sluice-stats --html past the limit: exit 1"
        has html "--html file '$T/p.html': writing failed: File too large (write failed at byte 1024)" "names the file and the byte"
        has html "$(hint 1024)" "the hint names the limit"
    fi
    # standard output redirected to a file: the tools' own check at exit, with the hint too
    if run stdout 1 limited 1 "$BIN/sluice-stats" --from "$T/s.old" --json; then
        ok "sluice-stats --json > FILE past the limit: exit 1"
        has stdout "sluice-stats: writing to standard output failed: File too large" "says standard output"
        has stdout "$(hint 1024)" "the hint names the limit"
    fi
fi
if run trace 1 limited 1 "$BIN/sluice-stats" "$T/c.sl" -p train --batches 5 --trace "$T/t.json"; then
    ok "sluice-stats --trace past the limit: exit 1"
    has trace "$T/t.json: cannot write the trace: File too large (write failed at byte 1024)" "names the file and the byte"
    has trace "$(hint 1024)" "the hint names the limit"
fi
[ ! -e "$T/t.json" ] && ok "--trace: no cut-off trace left" || fail "--trace left a cut-off trace"

# 4. a ps task: its shard (101,800 bytes) past 50 blocks; the worker writes no checkpoint.
# The ps's lines come prefixed "[ps 0] " on the launcher's output, its notes on stderr. The
# ps fails as it returns, right after the worker: the job fails with the ps's status 1
# (never 153), whether the launcher sees the ps end before the worker or after it.
limited 50 "$BIN/sluice-launch" -n 1 --ps 1 --port-base "$PB" --timeout 60 -- "$BIN/sluice-train" "$T/c.sl" \
    --run-dir "$T/psrun" --set train.strategy=ps --set train.checkpoint=none -q >"$T/ps.err" 2>&1
rc=$?
if [ "$rc" = 1 ]; then ok "a ps job whose last shard is past the limit: exit 1, the ps not killed"
else fail_show "the ps job: exit $rc, expected 1" "$T/ps.err"; fi
has ps "[worker 0] test accuracy " "the worker trains to the end"
has ps "$T/psrun/ps-0/shard-000000000000.safetensors: write failed at byte 51200: File too large" \
    "the ps names its shard and the byte"
has ps "$(hint 51200)" "the hint names the limit"
has ps "ps 0 exited with status 1" "the ps exits 1: its last shard is not saved"
no_tmp "$T/psrun" "*.tmp*" "no temporary shard left"

# 5. sluice-launch --keygen past 0 blocks (a key file is 235 bytes, under the smallest
# other limit): nothing written at all. Its stderr goes through a pipe, which no file-size
# limit stops, as a file would be stopped at byte 0 too.
keygen0() {
    limited 0 "$BIN/sluice-launch" --keygen "$T/keys/k" 2>&1 >/dev/null | cat >"$T/$1.err"
    return "${PIPESTATUS[0]}"
}
mkdir "$T/keys"
keygen0 keygen
rc=$?
if [ "$rc" = 1 ]; then
    ok "sluice-launch --keygen past the limit: exit 1"
    has keygen "sluice-launch: --keygen $T/keys/k: $T/keys/k.key: write failed at byte 0: File too large" \
        "the message names the key file and the byte"
    has keygen "$(hint 0)" "the hint names the limit"
else
    fail_show "sluice-launch --keygen past the limit: exit $rc, expected 1" "$T/keygen.err"
fi
left=$(ls -A "$T/keys")
if [ -z "$left" ]; then ok "--keygen: no key file or temporary file left"; else fail "--keygen left: $left"; fi
if run keygen1 0 "$BIN/sluice-launch" --keygen "$T/keys/k"; then
    cp "$T/keys/k.key" "$T/old.key"
    cp "$T/keys/k.pub" "$T/old.pub"
    keygen0 keygen2
    if [ $? = 1 ] &&
        cmp -s "$T/old.key" "$T/keys/k.key" && cmp -s "$T/old.pub" "$T/keys/k.pub" &&
        [ "$(ls -A "$T/keys" | wc -l)" = 2 ]; then
        ok "--keygen: the older pair kept as it was"
    else
        fail "--keygen changed the older pair: $(ls -A "$T/keys")"
    fi
fi

# 6. two ring replicas whose hash logs (32 bytes a step, a step for every 2 records with the
# batch at 2) pass 2 blocks in the first epoch; nothing else of theirs is that large by then.
# Both reach the limit at the same step; the one that fails first is reported for sure (the
# launcher may stop the other before it gets there).
sed 's/batch 50 drop_remainder/batch 2 drop_remainder/' "$T/c.sl" >"$T/hl.sl"
if run hashlog 1 limited 2 "$BIN/sluice-launch" -n 2 --port-base "$PB" --timeout 60 -- "$BIN/sluice-train" \
    "$T/hl.sl" --run-dir "$T/hlrun" --set train.strategy=ring --set train.checkpoint=none --hash-log "$T/hl" -q; then
    ok "--hash-log past the limit: the job fails"
    if grep -qF "[worker 0] sluice-train: $T/hl.0: write failed at byte 2048: File too large" "$T/hashlog.err" ||
        grep -qF "[worker 1] sluice-train: $T/hl.1: write failed at byte 2048: File too large" "$T/hashlog.err"; then
        ok "a replica names its hash log and the byte"
    else
        fail_show "no replica names its hash log and the byte 2048" "$T/hashlog.err"
    fi
    has hashlog "$(hint 2048)" "the hint names the limit"
fi
sl_finish
