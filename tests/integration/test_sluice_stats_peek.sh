#!/usr/bin/env bash
# sluice-stats --peek end to end: convert the first records of Fashion-MNIST with
# sluice-record, build pipelines from config files, and check what --peek prints against
# the idx files themselves (labels, and the CRC32C of the image bytes computed by Python);
# --json lines parse; usage errors exit 2; config and pipeline errors exit 1 with
# file:line:col.
set -u

SRC=${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${PYTHON:-/usr/bin/python3}

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-stats sluice-record
sl_require_fashion
if ! "$PY" -c 'import crc32c' 2>/dev/null; then echo "skipped: python3-crc32c is not installed"; exit 77; fi
sl_workdir peek
sl_convert_fashion 2 8

cat >"$T/f.sl" <<'EOF'
# records in file order: shard 0 holds the first 4 examples, shard 1 the next 4
pipeline train {
    files "data/train-*.tfrecord"
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)
}
pipeline batched {
    files "data/train-*.tfrecord"
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)
    batch 3
}
EOF

# The reference: labels and per-image CRC32C straight from the idx files.
"$PY" - "$FM" >"$T/ref.txt" <<'EOF'
import gzip, sys, crc32c
d = sys.argv[1]
labels = gzip.open(d + "/train-labels-idx1-ubyte.gz").read()[8:8 + 8]
images = gzip.open(d + "/train-images-idx3-ubyte.gz").read()[16:16 + 8 * 784]
for i in range(8):
    print(labels[i], "%08x" % crc32c.crc32c(images[i * 784:(i + 1) * 784]))
EOF
if [ "$(head -4 "$T/ref.txt" | cut -d' ' -f1 | tr '\n' ' ')" != "9 0 0 3 " ]; then
    fail "reference: the first Fashion-MNIST train labels are not 9 0 0 3: $(cat "$T/ref.txt")"
fi

# 1. text: two elements, labels 9 and 0, image crc as Python computes it
if run peek_text 0 "$BIN/sluice-stats" "$T/f.sl" --peek 2; then
    got=$(grep '^  label ' "$T/peek_text.out" | awk '{print $NF}' | tr '\n' ' ')
    crcs=$(grep '^  image ' "$T/peek_text.out" | awk '{print $4}' | tr '\n' ' ')
    want_crcs=$(head -2 "$T/ref.txt" | cut -d' ' -f2 | tr '\n' ' ')
    nel=$(grep -c '^element ' "$T/peek_text.out")
    if [ "$got" = "9 0 " ] && [ "$crcs" = "$want_crcs" ] && [ "$nel" = 2 ] &&
        grep -q '^  image  uint8\[28,28,1\]  crc32c ' "$T/peek_text.out"; then
        ok "--peek 2: labels 9 0, image dtype/shape and CRC32C match the idx file"
    else
        fail_show "--peek 2 text: labels '$got' crcs '$crcs' (want '$want_crcs'), $nel elements" "$T/peek_text.out"
    fi
fi

# 2. --json: one object per line, every field checked against the reference
if run peek_json 0 "$BIN/sluice-stats" "$T/f.sl" --pipeline train --peek 8 --json --values 4; then
    if "$PY" - "$T/peek_json.out" "$T/ref.txt" <<'EOF'; then
import json, sys
lines = open(sys.argv[1]).read().splitlines()
ref = [l.split() for l in open(sys.argv[2]).read().splitlines()]
assert len(lines) == 8, len(lines)
for i, line in enumerate(lines):
    o = json.loads(line)
    assert o["index"] == i, o
    c = o["components"]
    assert list(c) == ["image", "label"], list(c)
    img, lab = c["image"], c["label"]
    assert img["dtype"] == "uint8" and img["shape"] == [28, 28, 1] and img["numel"] == 784, img
    assert len(img["values"]) == 4 and all(isinstance(v, int) for v in img["values"]), img
    assert img["crc32c"] == ref[i][1], (i, img["crc32c"], ref[i][1])
    assert lab["dtype"] == "int64" and lab["shape"] == [] and lab["values"] == [int(ref[i][0])], lab
EOF
        ok "--peek 8 --json: 8 lines of JSON, labels and CRCs match"
    else
        fail "--json output"
        head -2 "$T/peek_json.out"
    fi
fi

# 3. batches, and --set changing the graph (batch size, an added take)
if run peek_batch 0 "$BIN/sluice-stats" "$T/f.sl" -p batched --peek 5 --json --values 3 \
    --set pipeline.batched.batch=4 --set=pipeline.batched.take=1; then
    if "$PY" -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
c = json.loads(lines[0])["components"]
assert c["label"]["shape"] == [4] and c["label"]["values"] == [9, 0, 0], c["label"]
assert c["image"]["shape"] == [4, 28, 28, 1], c["image"]
' "$T/peek_batch.out"; then
        ok "--set batch=4 and take=1: one batch of 4, labels 9 0 0 ..."
    else
        fail_show "--set output" "$T/peek_batch.out"
    fi
fi

# 4. the example config, pointed at the converted files; the test split's first labels
if run peek_example 0 "$BIN/sluice-stats" "$SRC/examples/fashion.sl" --pipeline test --peek 1 \
    --set "pipeline.test.files=\"$T/data/test-*.tfrecord\""; then
    if grep -q '^  image  float32\[8,28,28,1\]' "$T/peek_example.out" &&
        grep -Eq '^  label  int64\[8\] +crc32c [0-9a-f]{8}  9 2 1 1 6 1 4 6$' "$T/peek_example.out"; then
        ok "examples/fashion.sl pipeline test: float32[8,28,28,1] images, labels 9 2 1 1 6 1 4 6"
    else
        fail_show "examples/fashion.sl output" "$T/peek_example.out"
    fi
fi
# ... and its train pipeline: shuffled, so the same 8 labels in some order
if run peek_example_train 0 "$BIN/sluice-stats" "$SRC/examples/fashion.sl" --peek 5 --seed 3 --json \
    --values 8 --set "pipeline.train.files=\"$T/data/train-*.tfrecord\"" --set pipeline.train.batch=8; then
    want=$(cut -d' ' -f1 "$T/ref.txt" | sort | tr '\n' ' ')
    got=$("$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    for v in json.loads(l)["components"]["label"]["values"]: print(v)' "$T/peek_example_train.out" | sort | tr '\n' ' ')
    if [ "$got" = "$want" ]; then ok "examples/fashion.sl pipeline train: the 8 labels, shuffled"
    else fail "train labels '$got', want '$want'"; fi
fi

# 5. usage errors: exit 2 with a message
# check NAME WANT_RC GREP_PATTERN DESCRIPTION CMD...: exit status and a line of stderr (or stdout)
check() {
    local name=$1 want=$2 pat=$3 desc=$4
    shift 4
    if run "$name" "$want" "$@"; then
        if [ -z "$pat" ] || grep -q -- "$pat" "$T/$name.err" "$T/$name.out"; then ok "$desc"
        else fail "$desc: no '$pat' in the output"; sed 's/^/    /' "$T/$name.err"; fi
    fi
}
check usage_none 2 'missing CONFIG' "no arguments: exit 2" "$BIN/sluice-stats"
check usage_mode 2 'belong to the profile' "--peek with --trace: exit 2" \
    "$BIN/sluice-stats" "$T/f.sl" --peek 1 --trace x
check usage_peek 2 'expects an integer' "--peek x: exit 2" "$BIN/sluice-stats" "$T/f.sl" --peek x
check usage_opt 2 "unknown option '--bogus'" "unknown option: exit 2" "$BIN/sluice-stats" "$T/f.sl" --peek 1 --bogus
check usage_pipe 2 "did you mean 'train'? (the pipelines are train, batched)" \
    "unknown --pipeline: exit 2 with did-you-mean" "$BIN/sluice-stats" "$T/f.sl" --peek 1 --pipeline tran
check usage_set 2 "no 'nothing' statement" "--set to nowhere: exit 2" \
    "$BIN/sluice-stats" "$T/f.sl" --peek 1 --set nothing.here=1
check usage_two 2 'one CONFIG file' "two configs: exit 2" "$BIN/sluice-stats" "$T/f.sl" "$T/f.sl" --peek 1
check usage_shard 2 'must be below --shards' "--shard-index out of range: exit 2" \
    "$BIN/sluice-stats" "$T/f.sl" --peek 1 --shards 2 --shard-index 2
check help 0 'Usage: sluice-stats' "--help: exit 0" "$BIN/sluice-stats" --help
check missing 1 "config '$T/nope.sl': no such file" "a missing config file: exit 1" "$BIN/sluice-stats" "$T/nope.sl" --peek 1

# expect_err NAME GOOD BAD PATTERN...: ok GOOD when every PATTERN (grep) matches in
# $T/NAME.err, else fail BAD and show that file
expect_err() {
    local name=$1 good=$2 bad=$3 pat
    shift 3
    for pat in "$@"; do
        grep -q -- "$pat" "$T/$name.err" || { fail_show "$bad" "$T/$name.err"; return; }
    done
    ok "$good"
}

# 6. a syntax error in the config: exit 1, file:line:col, the line, a caret
printf 'pipeline train {\n    files "data/train-*.tfrecord\n}\n' >"$T/bad.sl"
run syntax 1 "$BIN/sluice-stats" "$T/bad.sl" --peek 1 &&
    expect_err syntax "syntax error: exit 1 with file:line:col and a caret" "syntax error message" \
        "^sluice-stats: $T/bad.sl:2:11: unterminated string$" '^              \^'

# 7. a mistake in the pipeline: exit 1 with file:line:col and the hint
printf 'pipeline train {\n    files "data/train-*.tfrecord"\n    shufle 100\n}\n' >"$T/typo.sl"
run typo 1 "$BIN/sluice-stats" "$T/typo.sl" --peek 1 &&
    expect_err typo "unknown op: exit 1, file:line:col, did you mean 'shuffle'?" "unknown op message" \
        "^sluice-stats: $T/typo.sl:3:5: unknown op 'shufle' in pipeline 'train'$" "^---> HINT: did you mean 'shuffle'?$"

# 8. an error while running: the wrong raw size, reported with the op and exit 1
printf 'pipeline train {\n    files "data/train-*.tfrecord"\n    map parse_example(image: bytes) | decode_raw(image, uint8, 27x27)\n}\n' >"$T/run.sl"
run runtime 1 "$BIN/sluice-stats" "$T/run.sl" --peek 1 &&
    expect_err runtime "pipeline error at run time: exit 1 naming op 'train/map' and decode_raw" \
        "run-time error message" "op 'train/map'" "decode_raw"

# 9. configs that are not regular files are refused at once (a FIFO used to block open()
# forever; /dev/zero was read until the OOM killer came); timeout turns a hang into a failure
mkfifo "$T/fifo.sl"
check cfg_fifo 1 "config '$T/fifo.sl': is a FIFO (named pipe), not a regular file" \
    "a FIFO as the config: exit 1 at once" timeout 10 "$BIN/sluice-stats" "$T/fifo.sl" --peek 1
check cfg_zero 1 "config '/dev/zero': is a character device, not a regular file" \
    "/dev/zero as the config: exit 1 at once" timeout 10 "$BIN/sluice-stats" /dev/zero --peek 1
check cfg_dir 1 "config '$T': is a directory, not a regular file" "a directory as the config: exit 1" \
    timeout 10 "$BIN/sluice-stats" "$T" --peek 1
truncate -s $((16 * 1024 * 1024 + 1)) "$T/huge.sl"
check cfg_huge 1 "config '$T/huge.sl': is 16777217 bytes, more than the limit of 16777216" \
    "a config over 16 MiB: exit 1" timeout 10 "$BIN/sluice-stats" "$T/huge.sl" --peek 1

# 10. a NUL byte in the config (it used to cut the string short) and a repeated option (the
# last copy used to win): exit 1 at FILE:LINE:COL
printf 'pipeline train {\n    files "data/train-*.tfrecord\0x"\n}\n' >"$T/nul.sl"
if run nul 1 "$BIN/sluice-stats" "$T/nul.sl" --peek 1; then
    if grep -q "^sluice-stats: $T/nul.sl:2:33: NUL byte (0x00) in the config$" "$T/nul.err"; then
        ok "a NUL byte inside a string: exit 1 at file:2:33"
    else
        fail "NUL byte message"
        cat -v "$T/nul.err"
    fi
fi
printf 'pipeline train {\n    files "data/train-*.tfrecord"\n    shuffle 10 seed=1 seed=2\n}\n' >"$T/dup.sl"
check dup 1 "$T/dup.sl:3:23: option 'seed' given twice (first at $T/dup.sl:3:16)" \
    "a repeated option: exit 1 naming both places" "$BIN/sluice-stats" "$T/dup.sl" --peek 1

# 11. --set with a path two pipelines match goes nowhere (it used to change the first one)
check set_ambiguous 2 "pipeline.batch matches pipeline 'train' and pipeline 'batched': say pipeline.train.batch or pipeline.batched.batch" \
    "an ambiguous --set: exit 2 listing the candidates" "$BIN/sluice-stats" "$T/f.sl" --peek 1 --set pipeline.batch=7

# 12. a failed write to standard output is an error (it used to exit 0 with the output cut)
want_full="sluice-stats: writing to standard output failed: No space left on device"
"$BIN/sluice-stats" "$T/f.sl" --peek 8 --json >/dev/full 2>"$T/full.err"
rc=$?
if [ "$rc" = 1 ] && grep -qx "$want_full" "$T/full.err"; then
    ok "--peek --json > /dev/full: exit 1, '$want_full'"
else
    fail_show "--peek --json > /dev/full: exit $rc" "$T/full.err"
fi
"$BIN/sluice-stats" "$T/f.sl" --peek 8 >/dev/full 2>"$T/full_text.err"
rc=$?
if [ "$rc" = 1 ] && grep -qx "$want_full" "$T/full_text.err"; then ok "--peek (text) > /dev/full: exit 1"
else fail "--peek > /dev/full: exit $rc"; cat "$T/full_text.err"; fi
"$BIN/sluice-stats" --help >/dev/full 2>"$T/full_help.err"
rc=$?
if [ "$rc" = 1 ] && grep -qx "$want_full" "$T/full_help.err"; then ok "--help > /dev/full: exit 1"
else fail "--help > /dev/full: exit $rc"; cat "$T/full_help.err"; fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all checks passed"
