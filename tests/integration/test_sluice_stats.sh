#!/usr/bin/env bash
# sluice-stats' profile end to end: convert some Fashion-MNIST with sluice-record, run a
# configured pipeline with sluice-stats and check the table and verdict lines, that --json
# parses (with the verdict and every op), that --html writes a page with inline SVG charts,
# that --trace writes trace-event JSON, that --save / --from round-trip, and the usage and
# file errors with their exit statuses. (--peek has its own test_sluice_stats_peek.sh.)
set -u

PY=${PYTHON:-/usr/bin/python3}

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-stats sluice-record
sl_require_fashion
sl_workdir stats
sl_convert_fashion 4 3000

cat >"$T/f.sl" <<'EOF'
pipeline train {
    files "data/train-*.tfrecord"
    interleave cycle=2 block=8 parallel=auto
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1)
        | scale(image, 1/255)  parallel=auto
    batch 32
    repeat
    prefetch auto
}
EOF

# 1. the table and the verdict
if run table 0 "$BIN/sluice-stats" "$T/f.sl" --seconds 1; then
    if grep -Eq '^op +kind +elements/s +busy +wait in +blocked +buffer use +parallel$' "$T/table.out" &&
        grep -Eq '^train/prefetch +prefetch +[0-9.]+ +[0-9]+% ' "$T/table.out" &&
        grep -Eq '^ +train/batch +map_batch +[0-9.]+ .* [0-9]+ auto$' "$T/table.out" &&
        grep -Eq "^verdict: (bottleneck: op '[^']+' \([a-z_]+\)|the pipeline is not the bottleneck|no op is saturated$)" "$T/table.out" &&
        grep -q '^  try: ' "$T/table.out" && grep -q "^pipeline 'train': [0-9]* elements in " "$T/table.out"; then
        ok "table: header, one row per op (map_batch with its auto parallelism), verdict and advice"
    else
        fail_show "table output" "$T/table.out"
    fi
fi

# 2. --json parses: the verdict names an op of the graph, the ops carry their counters
if run json 0 "$BIN/sluice-stats" "$T/f.sl" --batches 40 --json; then
    if "$PY" - "$T/json.out" <<'EOF'; then
import json, sys
d = json.load(open(sys.argv[1]))
assert d["pipeline"] == "train", d["pipeline"]
st = d["stats"]
assert st["format"] == "sluice-stats" and st["version"] == 1
labels = [o["label"] for o in st["ops"]]
assert labels[0] == "train/prefetch", labels
assert "train/batch" in labels and "train/interleave" in labels, labels
root = st["ops"][0]
assert root["elements"] == 40 and st["elements"] == 40, root
mb = st["ops"][labels.index("train/batch")]
assert mb["op"] == "map_batch" and mb["tuned"] is True and 1 <= mb["parallelism"] <= mb["threads"], mb
assert mb["bytes"] == mb["elements"] * 32 * (784 * 4 + 8), mb
v = d["verdict"]
assert v["op"] in labels or v["op"] == "(consumer)" or (v["op"] is None and v["summary"] == "no op is saturated"), v
assert v["summary"] and v["advice"], v
EOF
        ok "--json: parses; 40 elements at the root; map_batch bytes exact; the verdict names an op"
    else
        fail "--json output"
        head -c 2000 "$T/json.out"
    fi
fi

# 3. --html: one page with inline SVG charts; --trace: trace-event JSON; --save then --from
if run html 0 "$BIN/sluice-stats" "$T/f.sl" --seconds 1 --html "$T/p.html" --trace "$T/trace.json" \
    --save "$T/saved.json"; then
    nsvg=$(grep -c '<svg ' "$T/p.html" 2>/dev/null || echo 0)
    if [ -s "$T/p.html" ] && [ "$nsvg" -ge 4 ] && grep -q '<polyline' "$T/p.html" && grep -q '<rect' "$T/p.html" &&
        ! grep -q '<script' "$T/p.html"; then
        ok "--html: a page with $nsvg inline SVG charts, no scripts"
    else
        fail "--html page ($nsvg svg)"
    fi
    if "$PY" - "$T/trace.json" <<'EOF'; then
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert len(x) > 100, len(x)
for e in ev:
    assert all(k in e for k in ("ph", "ts", "pid", "tid", "name")), e
assert all("dur" in e and e["dur"] >= 0 for e in x)
assert any(e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("train/batch worker") for e in ev)
EOF
        ok "--trace: valid trace-event JSON with complete events and thread names"
    else
        fail "--trace file"
    fi
    if run from 0 "$BIN/sluice-stats" --from "$T/saved.json" && grep -q '^verdict: ' "$T/from.out" &&
        grep -Eq '^ +train/batch +map_batch ' "$T/from.out"; then
        ok "--save then --from: the same report from the file"
    else
        fail_show "--from report" "$T/from.out"
    fi
    if run from_json 0 "$BIN/sluice-stats" --from "$T/json.out" --json &&
        "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["stats"]["elements"] == 40' "$T/from_json.out"; then
        ok "--from reads what --json printed"
    else
        fail "--from on --json output"
    fi
fi

# 3b. (issue 15) a trace that fills its buffer says so on the console, with the exact count:
# range's one op makes one event per element, so 2000 elements with --trace-max 500 drop 1,500
cat >"$T/r.sl" <<'EOF'
pipeline train {
    range 0 100000000
}
EOF
if run trace_max 0 "$BIN/sluice-stats" "$T/r.sl" --batches 2000 --trace "$T/tmax.json" --trace-max 500; then
    if grep -Eqx "sluice-stats: trace: 1,500 events dropped after the first 500 \(the trace covers [0-9.]+ s of [0-9.]+ s\); raise --trace-max" "$T/trace_max.err" &&
        "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["otherData"]["dropped_events"] == 1500; assert sum(e["ph"] == "X" for e in d["traceEvents"]) == 500' "$T/tmax.json"; then
        ok "--trace-max 500: 500 events kept, the warning names the 1,500 dropped"
    else
        fail_show "--trace-max warning" "$T/trace_max.err"
    fi
fi
if run trace_nomax 0 "$BIN/sluice-stats" "$T/r.sl" --batches 2000 --trace "$T/tnomax.json" && ! grep -q "dropped" "$T/trace_nomax.err"; then
    ok "--trace under the default 1,000,000: no warning"
else
    fail "--trace without drops warned"
fi

# 3c. (issue 15) the throughput chart is on a log axis: a batch op at 100/s next to a map at
# 3200/s gets a bar of a third of the width (186.7 px of 560; on the old linear axis, 17.5)
cat >"$T/h.json" <<'EOF'
{"format": "sluice-stats", "version": 1, "wall_s": 10, "next_s": 9, "elements": 1000, "cpu_budget": 2,
 "ops": [{"label": "t/batch", "op": "batch", "parent": -1, "elements": 1000, "busy_s": 1},
         {"label": "t/map", "op": "map", "parent": 0, "elements": 32000, "busy_s": 9}]}
EOF
if run html_log 0 "$BIN/sluice-stats" --from "$T/h.json" --html "$T/h.html" &&
    grep -q 'font-size="12" data-scale="log">' "$T/h.html" &&
    grep -q 'log scale, one gridline per factor of 10' "$T/h.html" &&
    grep -q '>t/batch</text><rect x="230" y="39" width="186.7" height="18"' "$T/h.html" &&
    grep -q '>t/map</text><rect x="230" y="65" width="467.6" height="18"' "$T/h.html" &&
    grep -q 'fill="#666">100/s</text>' "$T/h.html"; then
    ok "--html: throughput on a log axis, the batch-level bar visible"
else
    fail "--html log axis"
    grep -A8 'data-scale' "$T/h.html"
fi

# 3d. (issue 15) no op saturated: the busiest op 21% busy while the consumer waits is not
# called "the bottleneck" (--from a file: the shares are exact)
cat >"$T/u.json" <<'EOF'
{"format": "sluice-stats", "version": 1, "wall_s": 5, "next_s": 4, "elements": 1000, "cpu_budget": 4,
 "ops": [{"label": "u/prefetch", "op": "prefetch", "parent": -1, "elements": 1000, "busy_s": 0.25},
         {"label": "u/map", "op": "map", "parent": 0, "elements": 1000, "busy_s": 4.2, "parallelism": 4},
         {"label": "u/source", "op": "tfrecord", "parent": 1, "elements": 1000, "busy_s": 0.5}]}
EOF
if run unsat 0 "$BIN/sluice-stats" --from "$T/u.json" && grep -qx "verdict: no op is saturated" "$T/unsat.out" &&
    grep -q "the busiest op, 'u/map' (map), is busy 21% of its lanes' time (under 50%)" "$T/unsat.out"; then
    ok "--from: busiest op 21% busy: 'no op is saturated'"
else
    fail_show "unsaturated verdict" "$T/unsat.out"
fi

# 4. usage and file errors
check() {
    local name=$1 want=$2 pat=$3 desc=$4
    shift 4
    if run "$name" "$want" "$@"; then
        if grep -q -- "$pat" "$T/$name.err" "$T/$name.out"; then ok "$desc"
        else fail "$desc: no '$pat' in the output"; sed 's/^/    /' "$T/$name.err"; fi
    fi
}
check bad_seconds 2 "--seconds expects a positive number" "--seconds x: exit 2" \
    "$BIN/sluice-stats" "$T/f.sl" --seconds x
check both 2 "exclude each other" "--seconds with --batches: exit 2" \
    "$BIN/sluice-stats" "$T/f.sl" --seconds 1 --batches 3
check from_cfg 2 "no CONFIG" "--from with a CONFIG: exit 2" "$BIN/sluice-stats" "$T/f.sl" --from "$T/saved.json"
check peek_html 2 "belong to the profile" "--peek with --html: exit 2" "$BIN/sluice-stats" "$T/f.sl" --peek 1 --html x
check trace_max_alone 2 "give --trace FILE too" "--trace-max without --trace: exit 2" \
    "$BIN/sluice-stats" "$T/r.sl" --trace-max 5
check from_missing 1 "stats file '$T/nope.json': no such file" "--from a missing file: exit 1" "$BIN/sluice-stats" --from "$T/nope.json"
echo '{"hello": 1}' >"$T/other.json"
check from_other 1 "not a sluice-stats file" "--from a JSON file of another kind: exit 1" \
    "$BIN/sluice-stats" --from "$T/other.json"

# 5. --from refuses what is not a stats file of sane size, at once (timeout turns a hang into
# a failure): /dev/zero used to be read until the OOM killer came, a FIFO to block
check from_zero 1 "stats file '/dev/zero': is a character device, not a regular file" \
    "--from /dev/zero: exit 1 at once" timeout 10 "$BIN/sluice-stats" --from /dev/zero
mkfifo "$T/fifo.json"
check from_fifo 1 "stats file '$T/fifo.json': is a FIFO (named pipe), not a regular file" \
    "--from a FIFO: exit 1 at once" timeout 10 "$BIN/sluice-stats" --from "$T/fifo.json"
check from_dir 1 "stats file '$T': is a directory, not a regular file" "--from a directory: exit 1" \
    timeout 10 "$BIN/sluice-stats" --from "$T"
truncate -s $((64 * 1024 * 1024 + 1)) "$T/huge.json"
check from_huge 1 "stats file '$T/huge.json': is 67108865 bytes, more than the limit of 67108864" \
    "--from a file over 64 MiB: exit 1" timeout 10 "$BIN/sluice-stats" --from "$T/huge.json"
if grep -q -- "--max-bytes" "$T/from_huge.err"; then ok "the limit's hint names --max-bytes"
else fail "no --max-bytes hint"; cat "$T/from_huge.err"; fi
size=$(stat -c %s "$T/saved.json")
check from_small 1 "is $size bytes, more than the limit of 100" "--max-bytes below the file's size: exit 1" \
    "$BIN/sluice-stats" --from "$T/saved.json" --max-bytes 100
check from_raised 0 "^verdict: " "--max-bytes at the file's size: read" \
    "$BIN/sluice-stats" --from "$T/saved.json" --max-bytes "$size"
check max_no_from 2 "use it with --from" "--max-bytes without --from: exit 2" \
    "$BIN/sluice-stats" "$T/f.sl" --max-bytes 100
# many tiny values (2^20 + 1 of them, so the array's room doubles to 2^21 values of 24 bytes):
# a tree that would take over 16x the file in memory is refused
"$PY" -c 'import sys; sys.stdout.write("[" + "0," * (1 << 20) + "0]")' >"$T/wide.json"
check from_wide 1 "would take more than 16 times the file's size in memory" \
    "--from a file built to exhaust memory: exit 1" "$BIN/sluice-stats" --from "$T/wide.json"

# 6. every write is checked: standard output, --trace, --html, --save (they used to exit 0
# with the output cut short). /dev/full fills stdout; a file size limit (ulimit -f, with
# SIGXFSZ ignored so write() fails with EFBIG) fills regular files.
want_full="sluice-stats: writing to standard output failed: No space left on device"
"$BIN/sluice-stats" --from "$T/saved.json" --json >/dev/full 2>"$T/full.err"
rc=$?
if [ "$rc" = 1 ] && grep -qx "$want_full" "$T/full.err"; then ok "--from --json > /dev/full: exit 1, '$want_full'"
else fail "--json > /dev/full: exit $rc"; cat "$T/full.err"; fi
"$BIN/sluice-stats" "$T/f.sl" --batches 5 >/dev/full 2>"$T/full_table.err"
rc=$?
if [ "$rc" = 1 ] && grep -qx "$want_full" "$T/full_table.err"; then ok "the table > /dev/full: exit 1"
else fail "table > /dev/full: exit $rc"; cat "$T/full_table.err"; fi
check trace_full 1 "trace file '/dev/full': is a character device, not a regular file" \
    "--trace /dev/full: exit 1 before running" timeout 10 "$BIN/sluice-stats" "$T/f.sl" --batches 5 --trace /dev/full
check trace_dir 1 "trace file '$T/nodir/t.json': no such file" "--trace in a missing folder: exit 1 before running" \
    timeout 10 "$BIN/sluice-stats" "$T/f.sl" --batches 5 --trace "$T/nodir/t.json"
limited() { (trap '' XFSZ; ulimit -f "$1"; shift; exec "$@"); }
check trace_efbig 1 "sluice-stats: $T/t.json: cannot write the trace: File too large" \
    "--trace on a full disk (ulimit -f 16): exit 1" limited 16 "$BIN/sluice-stats" "$T/f.sl" --batches 40 --trace "$T/t.json"
check html_efbig 1 "sluice-stats: --html file '$T/p2.html': writing failed: File too large" \
    "--html on a full disk: exit 1" limited 4 "$BIN/sluice-stats" --from "$T/saved.json" --html "$T/p2.html"
check save_efbig 1 "cannot write stats: File too large" "--save on a full disk: exit 1" \
    limited 1 "$BIN/sluice-stats" "$T/f.sl" --batches 40 --save "$T/s2.json"
if [ ! -e "$T/s2.json" ] && [ ! -e "$T/s2.json.tmp" ]; then ok "--save failed: no file left, no .tmp"
else fail "--save failure left $(ls "$T"/s2.json*)"; fi
check save_fifo 1 "stats file '$T/fifo.json': is a FIFO (named pipe), not a regular file" \
    "--save onto a FIFO: refused (a rename would replace it)" timeout 10 "$BIN/sluice-stats" "$T/f.sl" --batches 5 --save "$T/fifo.json"
if [ -p "$T/fifo.json" ]; then ok "the FIFO is still a FIFO"; else fail "--save replaced the FIFO"; fi

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all checks passed"
