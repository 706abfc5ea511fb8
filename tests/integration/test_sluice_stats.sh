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
        grep -Eq "^verdict: (bottleneck: op '[^']+' \([a-z_]+\)|the pipeline is not the bottleneck)" "$T/table.out" &&
        grep -q '^  try: ' "$T/table.out" && grep -q "^pipeline 'train': [0-9]* elements in " "$T/table.out"; then
        ok "table: header, one row per op (map_batch with its auto parallelism), verdict and advice"
    else
        fail "table output"
        cat "$T/table.out"
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
assert v["op"] in labels or v["op"] == "(consumer)", v
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
        fail "--from report"
        cat "$T/from.out"
    fi
    if run from_json 0 "$BIN/sluice-stats" --from "$T/json.out" --json &&
        "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["stats"]["elements"] == 40' "$T/from_json.out"; then
        ok "--from reads what --json printed"
    else
        fail "--from on --json output"
    fi
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
check from_missing 1 "cannot open stats" "--from a missing file: exit 1" "$BIN/sluice-stats" --from "$T/nope.json"
echo '{"hello": 1}' >"$T/other.json"
check from_other 1 "not a sluice-stats file" "--from a JSON file of another kind: exit 1" \
    "$BIN/sluice-stats" --from "$T/other.json"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all checks passed"
