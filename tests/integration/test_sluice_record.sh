#!/usr/bin/env bash
# End-to-end test of tools/sluice-record: usage and exit codes, verify/inspect/cat on the
# TFRecord files other writers made (tests/data/tfrecord-samples, copies with their
# MANIFEST.md: sources and licences; corrupt ones included), Fashion-MNIST conversion (raw, JPEG, gzip) and conversion of folder trees of
# JPEGs this script makes with cjpeg (shuffled shards, train/validation splits, bad files skipped and counted). Each check is printed; the first failure exits 1 with
# what was expected and what came out.
set -euo pipefail

BIN="${SLUICE_BIN:?set SLUICE_BIN to the bin directory of the build}"
TOOL="$BIN/sluice-record"
SRC="${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
SAMPLES="$SRC/tests/data/tfrecord-samples"
FMNIST=/usr/share/datasets/fashion-mnist

[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built"; exit 1; }
[ -d "$SAMPLES" ] || { echo "FAIL: $SAMPLES missing"; exit 1; }
command -v cjpeg >/dev/null || { echo "FAIL: cjpeg missing (libjpeg-turbo-progs)"; exit 1; }
command -v djpeg >/dev/null || { echo "FAIL: djpeg missing (libjpeg-turbo-progs)"; exit 1; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/sluice-record-test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
OUT="$TMP/stdout"
ERR="$TMP/stderr"
RC=0

fail() {
    echo "FAIL: $*"
    if [ -s "$OUT" ]; then echo "--- stdout (head):"; head -c 2000 "$OUT"; echo; fi
    if [ -s "$ERR" ]; then echo "--- stderr (head):"; head -c 2000 "$ERR"; echo; fi
    exit 1
}
check() { echo "check: $*"; }

# run CMD...: run it with stdout/stderr captured in $OUT/$ERR and its exit status in $RC.
run() {
    set +e
    "$@" >"$OUT" 2>"$ERR" </dev/null
    RC=$?
    set -e
}
# expect_rc N CMD...: run CMD and insist on exit status N.
expect_rc() {
    local want="$1"
    shift
    run "$@"
    [ "$RC" -eq "$want" ] || fail "'$*' exited $RC, expected $want"
}
expect_out() { grep -qF -- "$1" "$OUT" || fail "stdout lacks '$1'"; }
expect_err() { grep -qF -- "$1" "$ERR" || fail "stderr lacks '$1'"; }
expect_no_err() { [ ! -s "$ERR" ] || fail "stderr should be empty"; }
expect_no_out() { [ ! -s "$OUT" ] || fail "stdout should be empty"; }

# ---------------------------------------------------------------- help and usage errors
check "--help / -h print usage on stdout, exit 0"
for h in --help -h; do
    expect_rc 0 "$TOOL" "$h"
    expect_out "Usage: sluice-record COMMAND"
    expect_no_err
done
for c in inspect verify cat convert; do
    for h in --help -h; do
        expect_rc 0 "$TOOL" "$c" "$h"
        expect_out "Usage: sluice-record $c"
        expect_no_err
    done
done

check "wrong usage exits 2 with a message and a hint on stderr"
usage_case() {
    local what="$1"
    shift
    expect_rc 2 "$TOOL" "$@"
    expect_err "$what"
    expect_err "--help' for more information"
    expect_no_out
}
usage_case "missing COMMAND"
usage_case "unknown command 'frobnicate'" frobnicate
usage_case "unknown option '--bogus'" verify --bogus "$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords"
usage_case "unknown option '--bogus'" --bogus
usage_case "missing FILE" verify
usage_case "missing FILE" inspect
usage_case "missing FILE" cat --json
usage_case "option --limit needs an argument" cat "$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords" --limit
usage_case "option --limit expects an integer, got 'ten'" cat --limit ten "$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords"
usage_case "unknown compression 'lzma'" verify --compression lzma "$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords"
usage_case "missing --shards N" convert fashion-mnist "$TMP/never"
usage_case "option --shards must be between 1 and 99999, got 0" convert fashion-mnist "$TMP/never" --shards 0
usage_case "unknown source 'cifar'" convert cifar "$TMP/never" --shards 2
usage_case "images: missing DIR or OUT" convert images "$TMP/never" --shards 2
usage_case "--seed, --no-shuffle, --first-label and --strict apply to images only" convert fashion-mnist "$TMP/never" --shards 2 --seed 3
usage_case "--seed and --no-shuffle do not go together" convert images "$TMP/never" "$TMP/never2" --shards 2 --seed 3 --no-shuffle
usage_case "--split and --validation-fraction do not go together" convert images "$TMP/never" "$TMP/never2" --shards 2 --split x --validation-fraction 0.1
usage_case "--validation-shards needs --validation-fraction" convert images "$TMP/never" "$TMP/never2" --shards 2 --validation-shards 3
usage_case "--validation-fraction 'abc': expected a number between 0 and 1" convert images "$TMP/never" "$TMP/never2" --shards 2 --validation-fraction abc
usage_case "option --json takes no argument" cat --json=yes "$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords"
[ ! -e "$TMP/never" ] || fail "a usage error created $TMP/never"

check "an unreadable file exits 1 naming the file"
expect_rc 1 "$TOOL" verify "$TMP/no-such-file.tfrecord"
expect_err "$TMP/no-such-file.tfrecord"
expect_rc 1 "$TOOL" cat "$TMP/no-such-file.tfrecord"
expect_err "$TMP/no-such-file.tfrecord"

# ---------------------------------------------------------------- the shared samples
# file (relative to $SAMPLES) and its record count, from MANIFEST.md.
GOOD=(
    "pwnall__tfrecord/testdata__singles.tfrecords 3"
    "jongwook__tfrecord_lite/tests__test.tfrecord 42"
    "jongwook__tfrecord_lite/tests__images.tfrecord 2"
    "tensorflow__transform/examples__testdata__sequence_example__data_tfrecord.gz 3"
    "domj07__Tensorflow-Ion-Detetection/models__research__deeplab__testing__pascal_voc_seg__val-00000-of-00001.tfrecord 3"
    "other-writers/pwnall__tfrecord__data.tfrecord 1"
)
n_good=0
for entry in "${GOOD[@]}"; do
    f="$SAMPLES/${entry% *}"
    n="${entry##* }"
    check "verify $(basename "$f"): exit 0, $n records"
    expect_rc 0 "$TOOL" verify "$f"
    [ "$(cat "$OUT")" = "$f: OK, $n records" ] || fail "expected '$f: OK, $n records'"
    expect_no_err
    n_good=$((n_good + 1))
done
# Every file under the samples, found by listing, must be either in GOOD or under corrupt/.
while IFS= read -r f; do
    rel="${f#"$SAMPLES"/}"
    case "$rel" in
        MANIFEST.md | corrupt/*) continue ;;
    esac
    found=0
    for entry in "${GOOD[@]}"; do [ "${entry% *}" = "$rel" ] && found=1; done
    [ "$found" = 1 ] || fail "sample $rel is not covered by this test"
done < <(find "$SAMPLES" -type f | sort)

check "verify of all good samples at once: exit 0, one OK line each"
mapfile -t good_files < <(for e in "${GOOD[@]}"; do echo "$SAMPLES/${e% *}"; done)
expect_rc 0 "$TOOL" verify "${good_files[@]}"
[ "$(grep -c ': OK, ' "$OUT")" -eq "$n_good" ] || fail "expected $n_good OK lines"

# Both damaged files fail in their first record: pets_examples has a data CRC mismatch there
# (every CR byte was stripped), snapshot_serengeti's only record runs 4 bytes past the end.
# Fields: file, offset of the first error, records left intact (found independently by
# trying every byte offset for a record whose length and data CRCs both match).
CORRUPT=(
    "corrupt/models__research__object_detection__test_data__pets_examples.record 0 4"
    "corrupt/models__research__object_detection__test_data__snapshot_serengeti_sequence_examples.record 0 0"
)
for entry in "${CORRUPT[@]}"; do
    read -r rel off intact <<<"$entry"
    f="$SAMPLES/$rel"
    check "verify $(basename "$f"): exit 1, names the file and byte $off"
    expect_rc 1 "$TOOL" verify "$f"
    expect_err "$f: byte $off:"
    check "verify --skip-corrupt $(basename "$f"): exit 1, corrupt records counted"
    expect_rc 1 "$TOOL" verify --skip-corrupt "$f"
    expect_out "$f: CORRUPT, $intact good records, "
    expect_err "corrupt record"
    check "inspect/cat $(basename "$f"): exit 1 with the offset"
    expect_rc 1 "$TOOL" inspect "$f"
    expect_err "$f: byte $off:"
    expect_out "CORRUPT"
    expect_rc 1 "$TOOL" cat --json "$f"
    expect_err "$f: byte $off:"
done
check "verify of a good and a corrupt file: exit 1, the good one still reported OK"
expect_rc 1 "$TOOL" verify "$SAMPLES/${CORRUPT[0]%% *}" "$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords"
expect_out "$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords: OK, 3 records"

SINGLES="$SAMPLES/pwnall__tfrecord/testdata__singles.tfrecords"
check "cat --json singles.tfrecords is exactly TensorFlow's three Examples"
expect_rc 0 "$TOOL" cat --json "$SINGLES"
cat >"$TMP/expected.json" <<'EOF'
{"features": {"feature": {"int_feature": {"int64List": {"value": ["42"]}}}}}
{"features": {"feature": {"float_feature": {"floatList": {"value": [3.14]}}}}}
{"features": {"feature": {"byte_feature": {"bytesList": {"value": ["QEFCQ0Q="]}}}}}
EOF
diff -u "$TMP/expected.json" "$OUT" || fail "cat --json output differs (diff above)"
expect_no_err

check "cat --limit 2 prints 2 lines; --limit 0 none; text mode one line per record"
expect_rc 0 "$TOOL" cat --json --limit 2 "$SINGLES"
[ "$(wc -l <"$OUT")" -eq 2 ] || fail "expected 2 lines"
expect_rc 0 "$TOOL" cat --limit=0 "$SINGLES"
expect_no_out
expect_rc 0 "$TOOL" cat "$SINGLES" "$SINGLES"
[ "$(wc -l <"$OUT")" -eq 6 ] || fail "expected 6 lines"
head -n 1 "$OUT" | grep -qF 'int_feature=int64[1]{42}' || fail "first text line"
sed -n 3p "$OUT" | grep -qF 'byte_feature=bytes[1]' || fail "third text line"
expect_rc 0 "$TOOL" cat --json --limit 3 "$SINGLES" "$SINGLES"
diff -u "$TMP/expected.json" "$OUT" || fail "--limit across files"

check "cat --json on a gzip file (detected) and with --compression gzip"
GZ="$SAMPLES/tensorflow__transform/examples__testdata__sequence_example__data_tfrecord.gz"
expect_rc 0 "$TOOL" cat --json "$GZ"
[ "$(wc -l <"$OUT")" -eq 3 ] || fail "expected 3 lines"
cp "$OUT" "$TMP/gz.json"
expect_rc 0 "$TOOL" cat --json --compression gzip "$GZ"
diff -u "$TMP/gz.json" "$OUT" || fail "--compression gzip changed the output"
expect_rc 1 "$TOOL" verify --compression none "$GZ"
expect_err "$GZ"

check "inspect singles.tfrecords: counts, sizes and the feature summary"
expect_rc 0 "$TOOL" inspect "$SINGLES"
expect_out "  compression   none"
expect_out "  records       3"
expect_out "  payload bytes 82"
expect_out "  crc           ok"
expect_out "  smallest      24 bytes (record at byte 0)"
expect_out "  largest       29 bytes (record at byte 40)"
expect_out "  examples      3 (not Examples: 0)"
grep -qE '^    int_feature +int64 +1/3 +1 value$' "$OUT" || fail "int_feature line"
grep -qE '^    float_feature +float +1/3 +1 value$' "$OUT" || fail "float_feature line"
grep -qE '^    byte_feature +bytes +1/3 +1 value$' "$OUT" || fail "byte_feature line"
expect_rc 0 "$TOOL" inspect "$GZ"
expect_out "  compression   gzip"
expect_out "  records       3"

# ---------------------------------------------------------------- convert fashion-mnist
FM="$TMP/fm"
check "convert fashion-mnist --shards 4: 8 files, TensorFlow's names, nothing else"
expect_rc 0 "$TOOL" convert fashion-mnist "$FM" --shards 4
expect_out "wrote 60000 train + 10000 test records"
expect_no_err
(cd "$FM" && ls -A) >"$TMP/names"
printf '%s\n' test-0000{0,1,2,3}-of-00004.tfrecord train-0000{0,1,2,3}-of-00004.tfrecord >"$TMP/names.expected"
diff -u "$TMP/names.expected" "$TMP/names" || fail "shard names differ"

check "the shards verify, 60000 train and 10000 test records in contiguous blocks"
expect_rc 0 "$TOOL" verify "$FM"/train-*.tfrecord
for i in 0 1 2 3; do expect_out "$FM/train-0000$i-of-00004.tfrecord: OK, 15000 records"; done
[ "$(awk '{s += $3} END {print s}' "$OUT")" -eq 60000 ] || fail "train total"
expect_rc 0 "$TOOL" verify "$FM"/test-*.tfrecord
for i in 0 1 2 3; do expect_out "$FM/test-0000$i-of-00004.tfrecord: OK, 2500 records"; done
[ "$(awk '{s += $3} END {print s}' "$OUT")" -eq 10000 ] || fail "test total"

check "inspect a shard: image bytes and label int64 in every record"
expect_rc 0 "$TOOL" inspect "$FM/train-00000-of-00004.tfrecord"
grep -qE '^    image +bytes +15000/15000 +1 value$' "$OUT" || fail "image line"
grep -qE '^    label +int64 +15000/15000 +1 value$' "$OUT" || fail "label line"
# 784 image bytes + "image"/"label" keys + one int64 + protobuf framing = 822 bytes each.
expect_out "  smallest      822 bytes (record at byte 0)"
expect_out "  largest       822 bytes (record at byte 0)"
expect_out "  payload bytes 12330000"

# The idx files' first train label is 9 (ankle boot), the first test label 9, the last
# train label 5; shard 3's last record is record 59999.
first_label() {
    expect_rc 0 "$TOOL" cat --json --limit 1 "$1"
    sed -E 's/.*"label": \{"int64List": \{"value": \["([0-9]+)"\].*/\1/' "$OUT"
}
check "labels in order: record 0 of train, record 15000 (first of shard 1)"
gzip -dc "$FMNIST/train-labels-idx1-ubyte.gz" >"$TMP/train-labels"
gzip -dc "$FMNIST/train-images-idx3-ubyte.gz" >"$TMP/train-images"
want0=$(od -An -tu1 -j8 -N1 "$TMP/train-labels" | tr -d ' ')
want15000=$(od -An -tu1 -j$((8 + 15000)) -N1 "$TMP/train-labels" | tr -d ' ')
[ "$(first_label "$FM/train-00000-of-00004.tfrecord")" = "$want0" ] || fail "label of record 0"
[ "$(first_label "$FM/train-00001-of-00004.tfrecord")" = "$want15000" ] || fail "label of record 15000"
check "record 0's image is the 784 bytes of the idx file"
expect_rc 0 "$TOOL" cat --json --limit 1 "$FM/train-00000-of-00004.tfrecord"
sed -E 's/.*"image": \{"bytesList": \{"value": \["([^"]*)"\].*/\1/' "$OUT" | base64 -d >"$TMP/img0"
dd if="$TMP/train-images" of="$TMP/img0.expected" bs=1 skip=16 count=784 status=none
cmp "$TMP/img0" "$TMP/img0.expected" || fail "image bytes of record 0"

check "convert fashion-mnist --jpeg --limit 600 --shards 3 --quality 90: JPEGs djpeg reads"
FJ="$TMP/fmj"
expect_rc 0 "$TOOL" convert fashion-mnist "$FJ" --jpeg --quality 90 --limit 600 --shards 3
expect_out "wrote 600 train + 600 test records (jpeg"
expect_rc 0 "$TOOL" verify "$FJ"/train-*.tfrecord "$FJ"/test-*.tfrecord
[ "$(grep -c ': OK, 200 records' "$OUT")" -eq 6 ] || fail "expected 6 shards of 200"
expect_rc 0 "$TOOL" cat --json --limit 1 "$FJ/test-00002-of-00003.tfrecord"
sed -E 's/.*"image": \{"bytesList": \{"value": \["([^"]*)"\].*/\1/' "$OUT" | base64 -d >"$TMP/img.jpg"
djpeg -pnm "$TMP/img.jpg" >"$TMP/img.pgm" || fail "djpeg rejects the stored JPEG"
[ "$(head -c 2 "$TMP/img.pgm")" = "P5" ] || fail "expected a grayscale JPEG"
head -n 2 "$TMP/img.pgm" | tail -n 1 | grep -qx '28 28' || fail "expected 28x28"

check "convert --compression gzip: gzip files that verify with detection"
FG="$TMP/fmgz"
expect_rc 0 "$TOOL" convert fashion-mnist "$FG" --compression gzip --limit 100 --shards 1
[ "$(od -An -tx1 -N2 "$FG/train-00000-of-00001.tfrecord" | tr -d ' ')" = "1f8b" ] || fail "not gzip"
expect_rc 0 "$TOOL" verify "$FG/train-00000-of-00001.tfrecord"
expect_out "OK, 100 records"
expect_rc 0 "$TOOL" inspect "$FG/test-00000-of-00001.tfrecord"
expect_out "  compression   gzip"
check "convert --compression zlib, and more shards than records (empty shards)"
FZ="$TMP/fmz"
expect_rc 0 "$TOOL" convert fashion-mnist "$FZ" --compression zlib --limit 3 --shards 5
[ "$(ls "$FZ" | wc -l)" -eq 10 ] || fail "expected 10 files"
expect_rc 0 "$TOOL" verify "$FZ"/train-*.tfrecord
[ "$(awk '{s += $3} END {print s}' "$OUT")" -eq 3 ] || fail "3 records in all"
expect_out "$FZ/train-00000-of-00005.tfrecord: OK, 0 records"

check "convert fashion-mnist from a missing --src: exit 1 naming the file, no output left"
expect_rc 1 "$TOOL" convert fashion-mnist "$TMP/fmbad" --shards 2 --src "$TMP/nowhere"
expect_err "$TMP/nowhere/train-images-idx3-ubyte.gz"
[ ! -e "$TMP/fmbad" ] || [ -z "$(ls -A "$TMP/fmbad")" ] || fail "left files behind"

# ---------------------------------------------------------------- convert images
# A tree of small JPEGs: classes sorted (birds=0, cats=1, dogs=2), files sorted inside.
IMG="$TMP/images"
mkdir -p "$IMG/cats" "$IMG/dogs" "$IMG/birds"
# make_jpeg PATH W H SEED: a W x H color PPM with a pattern, through cjpeg.
make_jpeg() {
    local path="$1" w="$2" h="$3" seed="$4"
    LC_ALL=C awk -v w="$w" -v h="$h" -v s="$seed" 'BEGIN {
        printf "P6\n%d %d\n255\n", w, h
        for (y = 0; y < h; y++)
            for (x = 0; x < w; x++)
                printf "%c%c%c", (x * 7 + s) % 256, (y * 11 + s) % 256, (x * y + s) % 256
    }' >"$TMP/src.ppm"
    cjpeg -quality 90 "$TMP/src.ppm" >"$path"
}
make_jpeg "$IMG/cats/b.jpg" 8 6 1
make_jpeg "$IMG/cats/a.jpeg" 16 10 2
make_jpeg "$IMG/dogs/x.JPEG" 5 9 3
make_jpeg "$IMG/birds/z.jpg" 12 4 4
make_jpeg "$IMG/birds/y.jpg" 3 3 5
echo "not an image" >"$IMG/cats/notes.txt"
cp "$IMG/cats/b.jpg" "$IMG/dogs/upper.JPG"   # .JPG is not an accepted name: skipped
check "convert images --shards 2 --no-shuffle: 5 records, 2 skipped, TensorFlow's names"
IO="$TMP/imgout"
expect_rc 0 "$TOOL" convert images "$IMG" "$IO" --shards 2 --no-shuffle
expect_out "wrote 5 records of 3 classes to $IO: train 5 in 2 shards (class order) in "
expect_out "skipped 2 files that are not decodable JPEGs: cats/notes.txt, dogs/upper.JPG"
(cd "$IO" && ls -A) >"$TMP/names"
printf '%s\n' train-00000-of-00002.tfrecord train-00001-of-00002.tfrecord >"$TMP/names.expected"
diff -u "$TMP/names.expected" "$TMP/names" || fail "shard names differ"
expect_rc 0 "$TOOL" verify "$IO/train-00000-of-00002.tfrecord" "$IO/train-00001-of-00002.tfrecord"
expect_out "train-00000-of-00002.tfrecord: OK, 2 records"
expect_out "train-00001-of-00002.tfrecord: OK, 3 records"

check "convert images --no-shuffle: records in class then file order with every feature exact"
expect_rc 0 "$TOOL" cat --json "$IO/train-00000-of-00002.tfrecord" "$IO/train-00001-of-00002.tfrecord"
cp "$OUT" "$TMP/images.json"
b64() { printf '%s' "$1" | base64 -w0; }
# expect_record LINE CLASS LABEL FILE W H
expect_record() {
    local line="$1" cls="$2" label="$3" file="$4" w="$5" h="$6"
    local want got
    want="{\"features\": {\"feature\": {\"image/encoded\": {\"bytesList\": {\"value\": [\"$(base64 -w0 "$IMG/$cls/$file")\"]}}, \"image/format\": {\"bytesList\": {\"value\": [\"$(b64 JPEG)\"]}}, \"image/class/label\": {\"int64List\": {\"value\": [\"$label\"]}}, \"image/class/text\": {\"bytesList\": {\"value\": [\"$(b64 "$cls")\"]}}, \"image/height\": {\"int64List\": {\"value\": [\"$h\"]}}, \"image/width\": {\"int64List\": {\"value\": [\"$w\"]}}, \"image/filename\": {\"bytesList\": {\"value\": [\"$(b64 "$file")\"]}}}}}"
    got="$(sed -n "${line}p" "$TMP/images.json")"
    [ "$got" = "$want" ] || fail "record $line: expected
$want
got
$got"
}
expect_record 1 birds 0 y.jpg 3 3
expect_record 2 birds 0 z.jpg 12 4
expect_record 3 cats 1 a.jpeg 16 10
expect_record 4 cats 1 b.jpg 8 6
expect_record 5 dogs 2 x.JPEG 5 9
[ "$(wc -l <"$TMP/images.json")" -eq 5 ] || fail "expected 5 records"

check "convert images --strict with a corrupt JPEG: exit 1 naming its path, no shards left"
printf '\xff\xd8\xff\xe0garbage, not a JPEG at all' >"$IMG/dogs/broken.jpg"
expect_rc 1 "$TOOL" convert images "$IMG" "$TMP/imgbad" --shards 2 --strict
expect_err "$IMG/dogs/broken.jpg"
[ -z "$(ls -A "$TMP/imgbad" 2>/dev/null)" ] || fail "left files behind: $(ls -A "$TMP/imgbad")"

check "a JPEG cut short after its header: accepted by default, rejected by --full-decode"
CUT="$TMP/cut"
mkdir -p "$CUT/only"
make_jpeg "$TMP/big.jpg" 64 48 9
size=$(stat -c %s "$TMP/big.jpg")
head -c $((size / 2)) "$TMP/big.jpg" >"$CUT/only/half.jpg"
expect_rc 0 "$TOOL" convert images "$CUT" "$TMP/cutout" --shards 1
expect_out "wrote 1 records of 1 classes"
expect_rc 0 "$TOOL" cat --json "$TMP/cutout/train-00000-of-00001.tfrecord"
expect_out '"image/height": {"int64List": {"value": ["48"]}}, "image/width": {"int64List": {"value": ["64"]}}'
expect_rc 1 "$TOOL" convert images "$CUT" "$TMP/cutout2" --shards 1 --full-decode --strict
expect_err "$CUT/only/half.jpg"
[ -z "$(ls -A "$TMP/cutout2" 2>/dev/null)" ] || fail "left files behind"
# without --strict the cut file is skipped; being the only one, nothing is written: exit 1
expect_rc 1 "$TOOL" convert images "$CUT" "$TMP/cutout3" --shards 1 --full-decode
expect_err "$CUT: no image converted (1 file found); skipped 1 file that is not a decodable JPEG: only/half.jpg"
[ -z "$(ls -A "$TMP/cutout3" 2>/dev/null)" ] || fail "left files behind"
expect_rc 0 "$TOOL" convert images "$IMG" "$TMP/imgfull" --shards 1 --full-decode --limit 4 --no-shuffle
expect_out "wrote 4 records of 3 classes"

check "convert images on a missing DIR: exit 1 naming it"
expect_rc 1 "$TOOL" convert images "$TMP/no-tree" "$TMP/imgbad2" --shards 1
expect_err "$TMP/no-tree"


# ---------------------------------------------------------------- issue 15: convert images like TF's ImageNet scripts
# 3 classes x 4 JPEGs (ant=0, bee=1, cow=2), 3 shards.
MIX="$TMP/mix"
ci=0
for c in ant bee cow; do
    mkdir -p "$MIX/$c"
    ci=$((ci + 1))
    for k in 1 2 3 4; do make_jpeg "$MIX/$c/$k.jpg" $((k + 2)) 3 $((ci * 40 + k)); done
done
# labels FILE: the image/class/label values of FILE's records, in order, space-separated.
labels() {
    "$TOOL" cat --json "$1" | sed 's/.*"image\/class\/label": {"int64List": {"value": \["\([0-9]*\)"\].*/\1/' | tr '\n' ' '
}
# shard_labels DIR SPLIT N: "i: labels" for each shard, one line each.
shard_labels() {
    local i
    for ((i = 0; i < $3; i++)); do
        echo "$i: $(labels "$(printf '%s/%s-%05d-of-%05d.tfrecord' "$1" "$2" "$i" "$3")")"
    done
}
check "convert images shuffles with the default seed 12345: every shard mixes classes"
expect_rc 0 "$TOOL" convert images "$MIX" "$TMP/mix1" --shards 3
expect_out "wrote 12 records of 3 classes to $TMP/mix1: train 12 in 3 shards (shuffled, seed 12345) in "
shard_labels "$TMP/mix1" train 3 >"$TMP/got"
printf '%s\n' "0: 0 1 1 2 " "1: 1 0 2 1 " "2: 2 2 0 0 " >"$TMP/want"
diff -u "$TMP/want" "$TMP/got" || fail "shard labels differ (old code: 0 0 0 0 / 1 1 1 1 / 2 2 2 2)"

check "convert images: the same seed gives byte-identical shards, another seed another order"
expect_rc 0 "$TOOL" convert images "$MIX" "$TMP/mix2" --shards 3 --seed 12345
for i in 0 1 2; do
    f="$(printf 'train-%05d-of-00003.tfrecord' "$i")"
    cmp "$TMP/mix1/$f" "$TMP/mix2/$f" || fail "$f differs between two runs with seed 12345"
done
expect_rc 0 "$TOOL" convert images "$MIX" "$TMP/mix3" --shards 3 --seed 7
expect_out "(shuffled, seed 7)"
shard_labels "$TMP/mix3" train 3 >"$TMP/got7"
! diff -q "$TMP/got" "$TMP/got7" >/dev/null || fail "seed 7 gave the order of seed 12345"
cat "$TMP/mix3"/train-* | cmp -s - <(cat "$TMP/mix1"/train-*) && fail "seed 7 wrote seed 12345's bytes"
# the same 12 records either way
sort <(tr ' ' '\n' <"$TMP/got7" | grep -v ':' | grep .) | uniq -c | tr -s ' ' >"$TMP/c7"
printf '%s\n' " 4 0" " 4 1" " 4 2" >"$TMP/c7.want"
diff -u "$TMP/c7.want" "$TMP/c7" || fail "seed 7: label counts differ"

check "convert images --split validation names the shards validation-*"
expect_rc 0 "$TOOL" convert images "$MIX" "$TMP/mixv" --shards 2 --split validation
(cd "$TMP/mixv" && ls -A) >"$TMP/names"
printf '%s\n' validation-00000-of-00002.tfrecord validation-00001-of-00002.tfrecord >"$TMP/names.expected"
diff -u "$TMP/names.expected" "$TMP/names" || fail "--split names differ"
expect_rc 2 "$TOOL" convert images "$MIX" "$TMP/mixw" --shards 2 --split ../up
expect_err "--split '../up': expected a name"

check "convert images --validation-fraction 0.25: train and validation, exact counts per class"
expect_rc 0 "$TOOL" convert images "$MIX" "$TMP/mixtv" --shards 2 --validation-fraction 0.25
expect_out "wrote 12 records of 3 classes to $TMP/mixtv: train 9 in 2 shards, validation 3 in 1 shard (shuffled, seed 12345) in "
(cd "$TMP/mixtv" && ls -A) >"$TMP/names"
printf '%s\n' train-00000-of-00002.tfrecord train-00001-of-00002.tfrecord validation-00000-of-00001.tfrecord >"$TMP/names.expected"
diff -u "$TMP/names.expected" "$TMP/names" || fail "train/validation names differ"
count_labels() { cat "$@" | tr ' ' '\n' | grep . | sort | uniq -c | tr -s ' '; }
labels "$TMP/mixtv/train-00000-of-00002.tfrecord" >"$TMP/t0"
labels "$TMP/mixtv/train-00001-of-00002.tfrecord" >"$TMP/t1"
labels "$TMP/mixtv/validation-00000-of-00001.tfrecord" >"$TMP/v0"
[ "$(count_labels "$TMP/t0" "$TMP/t1")" = "$(printf '%s\n' " 3 0" " 3 1" " 3 2")" ] || fail "train counts: $(count_labels "$TMP/t0" "$TMP/t1")"
[ "$(count_labels "$TMP/v0")" = "$(printf '%s\n' " 1 0" " 1 1" " 1 2")" ] || fail "validation counts: $(count_labels "$TMP/v0")"
# no file in both splits
"$TOOL" cat --json "$TMP/mixtv"/*.tfrecord | grep -o '"image/encoded": {"bytesList": {"value": \["[^"]*' | sort | uniq -d >"$TMP/dups"
[ ! -s "$TMP/dups" ] || fail "an image is in both splits"
expect_rc 2 "$TOOL" convert images "$MIX" "$TMP/mixx" --shards 2 --validation-fraction 1
expect_err "--validation-fraction '1': expected a number between 0 and 1"

check "convert images --first-label 1: TensorFlow's ImageNet labels 1..N (0 = background)"
expect_rc 0 "$TOOL" convert images "$MIX" "$TMP/mix1b" --shards 1 --no-shuffle --first-label 1
[ "$(labels "$TMP/mix1b/train-00000-of-00001.tfrecord")" = "1 1 1 1 2 2 2 2 3 3 3 3 " ] || fail "labels: $(labels "$TMP/mix1b/train-00000-of-00001.tfrecord")"

check "convert images skips and counts a text file and a truncated JPEG, exit 0"
cp -r "$MIX" "$TMP/mixbad"
echo "just text" >"$TMP/mixbad/bee/readme.txt"
head -c 20 "$MIX/cow/1.jpg" >"$TMP/mixbad/cow/0-cut.jpg"
# cut inside its tables: TurboJPEG's header reader fails mid-header, and (before the fix in
# formats/jpeg.c) its handle then failed every later file as "0 x 0 image"
head -c 300 "$MIX/ant/1.jpg" >"$TMP/mixbad/ant/0-tables.jpg"
expect_rc 0 "$TOOL" convert images "$TMP/mixbad" "$TMP/mixbadout" --shards 3
expect_out "wrote 12 records of 3 classes to $TMP/mixbadout: train 12 in 3 shards (shuffled, seed 12345) in "
[ "$(sed -n 2p "$OUT")" = "skipped 3 files that are not decodable JPEGs: bee/readme.txt, cow/0-cut.jpg, ant/0-tables.jpg" ] || fail "summary line 2: $(sed -n 2p "$OUT")"
expect_err "skipped $TMP/mixbad/bee/readme.txt: not a .jpg, .jpeg or .JPEG file"
expect_err "skipped $TMP/mixbad/cow/0-cut.jpg: jpeg: bad header: 0 x 0 image"
expect_err "skipped $TMP/mixbad/ant/0-tables.jpg: jpeg: bad header: Invalid JPEG file structure: missing SOS marker"
[ "$(grep -c skipped "$ERR")" -eq 3 ] || fail "expected 3 skipped files on stderr"
for seed in 1 2 3 4; do
    expect_rc 0 "$TOOL" convert images "$TMP/mixbad" "$TMP/mixbadout$seed" --shards 1 --seed "$seed"
    expect_out "train 12 in 1 shard (shuffled, seed $seed)"
done
n=0
for f in "$TMP/mixbadout"/train-*; do n=$((n + $(labels "$f" | wc -w))); done
[ "$n" -eq 12 ] || fail "expected 12 records, found $n"

check "convert images on a folder of only bad files: exit 1, the counts, no shards"
mkdir -p "$TMP/allbad/x"
echo "text" >"$TMP/allbad/x/a.jpg"
head -c 20 "$MIX/ant/1.jpg" >"$TMP/allbad/x/b.jpg"
expect_rc 1 "$TOOL" convert images "$TMP/allbad" "$TMP/allbadout" --shards 2
expect_err "$TMP/allbad: no image converted (2 files found); skipped 2 files that are not decodable JPEGs: x/b.jpg, x/a.jpg"
[ -z "$(ls -A "$TMP/allbadout" 2>/dev/null)" ] || fail "left files behind: $(ls -A "$TMP/allbadout")"

# ---------------------------------------------------------------- issue 11: hostile inputs
check "a FIFO given as a file is refused at once (it used to block in open)"
mkfifo "$TMP/fifo"
for c in verify inspect cat; do
    expect_rc 1 timeout 10 "$TOOL" "$c" "$TMP/fifo"
    expect_err "'$TMP/fifo': is a FIFO (named pipe), not a regular file"
done

check "- reads standard input (a pipe): verify and cat"
set +e
gzip -dc "$GZ" | "$TOOL" verify - >"$OUT" 2>"$ERR"
RC=$?
set -e
[ "$RC" -eq 0 ] || fail "verify - exited $RC"
expect_out "-: OK, 3 records"
set +e
"$TOOL" cat --json - <"$SINGLES" >"$OUT" 2>"$ERR"
RC=$?
set -e
[ "$RC" -eq 0 ] || fail "cat - exited $RC"
diff -u "$TMP/expected.json" "$OUT" || fail "cat - output differs"

check "--max-record: a longer record in a gzip file is refused, naming the file and offset"
expect_rc 1 "$TOOL" verify --max-record 100 "$GZ"
expect_err "$GZ: byte 0 (uncompressed): record of 140 bytes is larger than the limit of 100 bytes"
expect_err "--max-record"
expect_rc 0 "$TOOL" verify --max-record 140 "$GZ"
expect_rc 2 "$TOOL" verify --max-record 0 "$GZ"

check "cat while the file is truncated under it: exit 1 naming the file (was SIGBUS, 135)"
cp "$FM/train-00000-of-00004.tfrecord" "$TMP/shrink.tfrecord"
full=$(stat -c %s "$TMP/shrink.tfrecord")
set +e
"$TOOL" cat "$TMP/shrink.tfrecord" 2>"$ERR" |
    { head -c 1000 >/dev/null; truncate -s 8192 "$TMP/shrink.tfrecord"; cat >/dev/null; }
rcs=("${PIPESTATUS[@]}")
set -e
[ "${rcs[0]}" -eq 1 ] || fail "cat exited ${rcs[0]} during the truncation (135 is SIGBUS), expected 1"
expect_err "$TMP/shrink.tfrecord: shrank from $full to 8192 bytes while being read"

check "damage inside a gzip file: the records before it are kept (fail and skip mode)"
expect_rc 0 "$TOOL" convert fashion-mnist "$TMP/fmgz" --shards 1 --limit 1250 --compression gzip
DG="$TMP/fmgz/train-00000-of-00001.tfrecord"
gsize=$(stat -c %s "$DG")
printf '\x55\xaa\x55\xaa\x55\xaa\x55\xaa' | dd of="$DG" bs=1 seek=$((gsize / 2)) conv=notrunc status=none
expect_rc 1 "$TOOL" verify "$DG"
good=$(sed -n 's/.*CORRUPT after \([0-9]*\) good records.*/\1/p' "$OUT")
[ -n "$good" ] && [ "$good" -gt 0 ] || fail "fail mode kept no records (was 0 before issue 11)"
expect_rc 1 "$TOOL" verify --skip-corrupt "$DG"
kept=$(sed -n 's/.*CORRUPT, \([0-9]*\) good records.*/\1/p' "$OUT")
[ -n "$kept" ] && [ "$kept" -ge "$good" ] || fail "skip mode kept $kept records, fewer than fail mode's $good"
expect_out "damaged place in the gzip stream"
echo "  gzip damage: $good records before the error, $kept in skip mode (of 1250)"

# ---------------------------------------------------------------- entries that are not readable files
# Every entry of a convert images folder that is not converted is named and counted, whatever
# it is; nothing is opened in a way that can block (each run is under `timeout 20`: a FIFO
# opened for reading would hang, and timeout's 124 fails the check).
K="$TMP/kinds"
mkdir -p "$K/c" "$K/c/dir.jpg"
make_jpeg "$K/c/good.jpg" 4 4 1
ln -s "$K/c/gone.jpg" "$K/c/dangling.jpg"
mkfifo "$K/c/fifo.jpg"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$K/c/sock.jpg"
ln -s /dev/null "$K/c/dev.jpg"
ln -s loop.jpg "$K/c/loop.jpg"
: >"$K/c/empty.jpg"
echo "not a JPEG" >"$K/c/text.jpg"
# a regular file whose read fails (EIO), as a file without read permission does for a user
# other than root
ln -s /proc/self/mem "$K/c/mem.jpg"
n_kinds=9
if [ "$(id -u)" != 0 ]; then
    make_jpeg "$K/c/noperm.jpg" 4 4 2
    chmod 000 "$K/c/noperm.jpg"
    n_kinds=10
fi
check "convert images: a dangling symlink, a FIFO, a socket, a device, a directory, a symlink loop, an empty, a non-JPEG and an unreadable file named and counted"
expect_rc 0 timeout 20 "$TOOL" convert images "$K" "$TMP/kindsout" --shards 1 --no-shuffle
[ "$(sed -n 1p "$OUT")" = "wrote 1 records of 1 classes to $TMP/kindsout: train 1 in 1 shard (class order) in $(sed -n 's/.* in \([0-9.]* s\)$/\1/p' "$OUT")" ] ||
    fail "summary line 1: $(sed -n 1p "$OUT")"
[ "$(sed -n 2p "$OUT")" = "skipped $n_kinds files that are not decodable JPEGs: c/dangling.jpg, c/dev.jpg, c/dir.jpg and $((n_kinds - 3)) more" ] ||
    fail "summary line 2: $(sed -n 2p "$OUT")"
expect_err "sluice-record: skipped $K/c/dangling.jpg: is a symbolic link to '$K/c/gone.jpg', which does not exist"
expect_err "sluice-record: skipped $K/c/dev.jpg: is a character device, not a regular file"
expect_err "sluice-record: skipped $K/c/dir.jpg: is a directory, not a regular file"
expect_err "sluice-record: skipped $K/c/fifo.jpg: is a FIFO (named pipe), not a regular file"
expect_err "sluice-record: skipped $K/c/loop.jpg: is a symbolic link that cannot be followed: Too many levels of symbolic links"
expect_err "sluice-record: skipped $K/c/sock.jpg: is a socket, not a regular file"
expect_err "sluice-record: skipped $K/c/empty.jpg: jpeg: empty input (0 bytes)"
expect_err "sluice-record: skipped $K/c/mem.jpg: cannot read: Input/output error"
expect_err "sluice-record: skipped $K/c/text.jpg: jpeg: bad header"
[ "$(id -u)" = 0 ] || expect_err "sluice-record: skipped $K/c/noperm.jpg: cannot open: Permission denied"
[ "$(grep -c '^sluice-record: skipped ' "$ERR")" -eq "$n_kinds" ] || fail "expected $n_kinds skipped lines on stderr"
expect_rc 0 "$TOOL" verify "$TMP/kindsout/train-00000-of-00001.tfrecord"
expect_out "OK, 1 records"

check "convert images: a dangling symlink and a FIFO alone, counted and named in the summary"
DF="$TMP/danglefifo"
mkdir -p "$DF/a"
make_jpeg "$DF/a/good.jpg" 4 4 3
ln -s "$DF/a/gone.jpg" "$DF/a/dangling.jpg"
mkfifo "$DF/a/fifo.jpg"
expect_rc 0 timeout 20 "$TOOL" convert images "$DF" "$TMP/dfout" --shards 1
expect_out "wrote 1 records of 1 classes to $TMP/dfout: train 1 in 1 shard (shuffled, seed 12345) in "
[ "$(sed -n 2p "$OUT")" = "skipped 2 files that are not decodable JPEGs: a/dangling.jpg, a/fifo.jpg" ] ||
    fail "summary line 2: $(sed -n 2p "$OUT")"

check "convert images --strict: exit 1 at the first (the dangling symlink), no shards, the FIFO never opened"
expect_rc 1 timeout 20 "$TOOL" convert images "$DF" "$TMP/dfstrict" --shards 1 --strict
[ "$(cat "$ERR")" = "sluice-record: $DF/a/dangling.jpg: is a symbolic link to '$DF/a/gone.jpg', which does not exist" ] ||
    fail "strict: stderr"
expect_no_out
[ -z "$(ls -A "$TMP/dfstrict" 2>/dev/null)" ] || fail "left files behind: $(ls -A "$TMP/dfstrict")"
rm "$DF/a/dangling.jpg"
expect_rc 1 timeout 20 "$TOOL" convert images "$DF" "$TMP/dfstrict" --shards 1 --strict
[ "$(cat "$ERR")" = "sluice-record: $DF/a/fifo.jpg: is a FIFO (named pipe), not a regular file" ] || fail "strict: stderr"
[ -z "$(ls -A "$TMP/dfstrict" 2>/dev/null)" ] || fail "left files behind: $(ls -A "$TMP/dfstrict")"
expect_rc 1 timeout 20 "$TOOL" convert images "$K" "$TMP/kstrict" --shards 1 --strict --no-shuffle
expect_err "sluice-record: $K/c/dangling.jpg: is a symbolic link to"

check "convert images: entries of DIR that are not class folders are named and counted; --strict stops at one it cannot examine"
TL="$TMP/toplevel"
mkdir -p "$TL/a"
make_jpeg "$TL/a/good.jpg" 4 4 4
echo "cat dog" >"$TL/labels.txt"
ln -s "$TL/missing" "$TL/ghost"
expect_rc 0 timeout 20 "$TOOL" convert images "$TL" "$TMP/tlout" --shards 1
expect_out "wrote 1 records of 1 classes to $TMP/tlout"
[ "$(sed -n 2p "$OUT")" = "skipped 2 files that are not decodable JPEGs: ghost, labels.txt" ] ||
    fail "summary line 2: $(sed -n 2p "$OUT")"
expect_err "sluice-record: skipped $TL/ghost: is a symbolic link to '$TL/missing', which does not exist"
expect_err "sluice-record: skipped $TL/labels.txt: is a regular file, not a class folder"
expect_rc 1 timeout 20 "$TOOL" convert images "$TL" "$TMP/tlstrict" --shards 1 --strict
[ "$(cat "$ERR")" = "sluice-record: $TL/ghost: is a symbolic link to '$TL/missing', which does not exist" ] || fail "strict: stderr"
[ -z "$(ls -A "$TMP/tlstrict" 2>/dev/null)" ] || fail "left files behind"

check "verify, inspect and cat: a dangling symlink is refused naming it and its target"
ln -s "$TMP/gone.tfrecord" "$TMP/dangling.tfrecord"
for c in verify inspect cat; do
    expect_rc 1 timeout 20 "$TOOL" "$c" "$TMP/dangling.tfrecord"
    expect_err "'$TMP/dangling.tfrecord': no such file"
    expect_err "---> HINT: '$TMP/dangling.tfrecord' is a symbolic link to '$TMP/gone.tfrecord', which does not exist"
done
check "verify, inspect and cat: a FIFO, a socket or a directory given among good files is refused naming it; the rest still read"
for c in verify inspect cat; do
    expect_rc 1 timeout 20 "$TOOL" "$c" "$SINGLES" "$TMP/fifo" "$K/c/sock.jpg" "$K/c/dir.jpg" "$SINGLES"
    expect_err "'$TMP/fifo': is a FIFO (named pipe), not a regular file"
    if [ "$c" != cat ]; then # cat stops at the first bad file
        expect_err "'$K/c/sock.jpg': is a socket, not a regular file"
        expect_err "'$K/c/dir.jpg': is a directory, not a regular file"
    fi
done

check "convert fashion-mnist: a FIFO or a dangling symlink among the idx files is refused naming it"
FS="$TMP/fmsrc"
mkdir -p "$FS"
for f in train-images-idx3-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do ln -s "$FMNIST/$f" "$FS/$f"; done
mkfifo "$FS/train-labels-idx1-ubyte.gz"
expect_rc 1 timeout 20 "$TOOL" convert fashion-mnist "$TMP/fmfifo" --shards 1 --limit 10 --src "$FS"
expect_err "'$FS/train-labels-idx1-ubyte.gz': is a FIFO (named pipe), not a regular file"
rm "$FS/train-labels-idx1-ubyte.gz"
ln -s "$FS/gone.gz" "$FS/train-labels-idx1-ubyte.gz"
expect_rc 1 timeout 20 "$TOOL" convert fashion-mnist "$TMP/fmfifo" --shards 1 --limit 10 --src "$FS"
expect_err "'$FS/train-labels-idx1-ubyte.gz': no such file"
expect_err "---> HINT: '$FS/train-labels-idx1-ubyte.gz' is a symbolic link to '$FS/gone.gz', which does not exist"
[ -z "$(ls -A "$TMP/fmfifo" 2>/dev/null)" ] || fail "left files behind"

check "no progress output when stderr is not a terminal"
expect_rc 0 "$TOOL" verify "$FM/train-00000-of-00004.tfrecord"
expect_no_err

echo "PASS: test_sluice_record"
