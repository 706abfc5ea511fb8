#!/usr/bin/env python3
"""Make the benchmark tables of README.md and docs/benchmarks.md from tests/bench/results.tsv.

Usage: gen_bench_docs.py [--check] [SRC_DIR]   (default: this script's parent folder)

tests/bench/results.tsv holds one recorded run a line, in the order recorded, tab-separated:
date (YYYY-MM-DD), commit, machine, the run's RESULT line as the bench printed it, and a
note; lines starting with # are comments. `tests/bench/run NAME --record` appends a line.
Each table lives between two marker comments of its page:

  README.md           <!-- bench-table: begin ... -->    the latest run of each benchmark
  docs/benchmarks.md  <!-- bench-latest: begin ... -->   the same, every figure of its RESULT line
                      <!-- bench-history: begin ... -->  every recorded run, newest first
                      <!-- bench-recorded: begin ... --> every recorded run that is not a
                                                         benchmark's (run_*), newest first

and everything between the markers is rewritten; the rest of each page is left as it is.
Any page (README.md, docs/**/*.md) may also hold tables of recorded runs that are not
benchmarks (trainings whose accuracy or speed a page quotes), one row per recorded line of
result NAME in file order, the note as the row's label:

  <!-- bench-runs: begin NAME; LABEL: KEY; LABEL: KEY ... -->  ...  <!-- bench-runs: end -->

where each LABEL is a column heading and KEY the RESULT field shown under it (`—` where a
run has none).
--check writes nothing and exits 1 when a page is not what this would write (the suite's
source/check_docs runs it), naming the page. Exit 2 on a malformed results file, with its
line number.
"""
import os
import re
import sys

# how each benchmark's ratio reads: "higher" (a rate over the anchor's: higher is better) or
# "lower" (a time over the anchor's: lower is better), None without an anchor; and what is
# compared, in a few words
BENCHES = {
    "bench_tfrecord": ("higher", "reading TFRecords with both CRCs checked vs `cat` of the file"),
    "bench_pipeline": ("higher", "the ImageNet JPEG pipeline vs PyTorch's DataLoader + torchvision"),
    "bench_jpeg_cpu": (None, "CPU time per image of the JPEG modes vs a full decode (no anchor)"),
    "bench_train": ("higher", "training the MLP and CNN on the CPU vs PyTorch on the CPU"),
    "bench_train_gpu": ("higher", "training the CNN on one GPU vs its fp32 arithmetic bound"),
    "bench_allreduce": ("lower", "allreduce on one host vs Open MPI's defaults (time)"),
    "bench_allreduce_hosts": ("lower", "allreduce across namespace hosts at 1 Gbit/s vs Open MPI over TCP (time)"),
    "bench_autotune": ("higher", "autotune vs the best hand setting"),
    "bench_resume": ("lower", "time to the first batch of a resume vs replaying the epoch (time)"),
    "bench_ps": ("higher", "parameter servers vs the ring on the same model"),
    "bench_python": ("higher", "the pipeline from Python vs the C API"),
    "bench_compress": ("higher", "ring training with int8 gradients vs none on a 100 Mbit/s link"),
}
MARKERS = {
    "README.md": ["bench-table"],
    os.path.join("docs", "benchmarks.md"): ["bench-latest", "bench-history", "bench-recorded"],
}
COLS = 5


class Bad(Exception):
    pass


def read_results(path):
    runs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != COLS:
                raise Bad(f"{path}:{n}: {len(cols)} tab-separated columns, not {COLS} (date, commit, machine, result, note)")
            date, commit, machine, result, note = cols
            if not re.fullmatch(r"\d{4}-\d\d-\d\d", date):
                raise Bad(f"{path}:{n}: date '{date}' is not YYYY-MM-DD")
            if not re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?|unknown", commit):
                raise Bad(f"{path}:{n}: commit '{commit}' is not a git hash (or unknown)")
            words = result.split()
            if len(words) < 2 or words[0] != "RESULT":
                raise Bad(f"{path}:{n}: the result column is not a RESULT line: '{result}'")
            fields = {}
            for w in words[2:]:
                k, eq, v = w.partition("=")
                if not eq or not k:
                    raise Bad(f"{path}:{n}: '{w}' in the RESULT line is not KEY=VALUE")
                fields[k] = v
            runs.append({"line": n, "date": date, "commit": commit, "machine": machine, "name": words[1],
                         "fields": fields, "note": note})
    return runs


def benches(runs):
    """The runs of benchmarks (bench_*): those the README's and the benchmarks page's tables show."""
    return [r for r in runs if r["name"].startswith("bench_")]


def latest(runs):
    """The last recorded run of each benchmark, in the order BENCHES lists them (others after)."""
    last = {}
    for r in benches(runs):
        last[r["name"]] = r
    order = [b for b in BENCHES if b in last] + sorted(b for b in last if b not in BENCHES)
    return [last[b] for b in order]


def num(v):
    """A figure as the page shows it: thousands grouped, the digits the bench printed kept."""
    m = re.fullmatch(r"(-?)(\d+)(\.\d+)?", v)
    if not m or len(m.group(2)) < 5:
        return v
    return f"{m.group(1)}{int(m.group(2)):,}{m.group(3) or ''}"


def reads(name):
    way = BENCHES.get(name, (None, ""))[0]
    return {"higher": "higher is better", "lower": "time: lower is better"}.get(way, "no anchor")


def esc(s):
    return s.replace("|", "\\|")


def readme_table(runs):
    out = ["| benchmark | what is compared | ratio | Sluice | anchor | run |", "|---|---|---|---|---|---|"]
    for r in latest(runs):
        f = r["fields"]
        unit = f.get("unit", "")
        out.append(f"| `{r['name']}` | {esc(BENCHES.get(r['name'], (None, ''))[1])} | "
                   f"{f.get('ratio', '—')} ({reads(r['name'])}) | {num(f['sluice']) + ' ' + unit if 'sluice' in f else '—'} | "
                   f"{num(f['anchor']) + ' ' + unit if 'anchor' in f else '—'} | {r['date']}, {r['commit']}, {esc(r['machine'])} |")
    return out


def figures(r):
    skip = {"ratio", "sluice", "anchor", "unit"}
    return ", ".join(f"{k}={num(v)}" for k, v in r["fields"].items() if k not in skip) or "—"


def latest_table(runs):
    out = ["| benchmark | ratio | Sluice | anchor | unit | the RESULT line's other figures | date | commit | machine | note |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in latest(runs):
        f = r["fields"]
        out.append(f"| `{r['name']}` | {f.get('ratio', '—')} ({reads(r['name'])}) | {num(f.get('sluice', '—'))} | "
                   f"{num(f.get('anchor', '—'))} | {f.get('unit', '—')} | {esc(figures(r))} | {r['date']} | "
                   f"{r['commit']} | {esc(r['machine'])} | {esc(r['note']) or '—'} |")
    return out


def history_table(runs):
    out = ["| date | benchmark | ratio | Sluice | anchor | unit | commit | machine |", "|---|---|---|---|---|---|---|---|"]
    for r in sorted(benches(runs), key=lambda r: (r["date"], r["line"]), reverse=True):
        f = r["fields"]
        out.append(f"| {r['date']} | `{r['name']}` | {f.get('ratio', '—')} | {num(f.get('sluice', '—'))} | "
                   f"{num(f.get('anchor', '—'))} | {f.get('unit', '—')} | {r['commit']} | {esc(r['machine'])} |")
    return out


def runs_tables(text, page, runs):
    """Every bench-runs table of a page, rewritten from the runs."""
    rx = re.compile(r"(<!-- bench-runs: begin ([^;>]+?)((?:;[^;>]+)*) -->\n)(.*?)(<!-- bench-runs: end -->)", re.S)
    out, at = [], 0
    for m in rx.finditer(text):
        name = m.group(2).strip()
        cols = []
        for c in m.group(3).split(";")[1:]:
            label, colon, key = c.rpartition(":")
            if not colon or not label.strip() or not key.strip():
                raise Bad(f"{page}: bench-runs '{name}': '{c.strip()}' is not 'LABEL: KEY'")
            cols.append((label.strip(), key.strip()))
        rows = [r for r in runs if r["name"] == name]
        if not rows:
            raise Bad(f"{page}: bench-runs '{name}': no run of that name in the results file")
        table = ["| run | " + " | ".join(l for l, _ in cols) + " | recorded |",
                 "|---" * (len(cols) + 2) + "|"]
        for r in rows:
            table.append(f"| {esc(r['note']) or '—'} | " + " | ".join(num(r["fields"].get(k, "—")) for _, k in cols)
                         + f" | {r['date']}, {r['commit']}, {esc(r['machine'])} |")
        out.append(text[at:m.start()] + m.group(1) + "\n".join(table) + "\n" + m.group(5))
        at = m.end()
    return "".join(out) + text[at:]


def pages(src):
    """The documentation's pages, relative to src: README.md, then docs/**/*.md in path order
    (also what tests/check_docs.py and tests/integration/test_docs.py walk)."""
    out = ["README.md"]
    for root, dirs, files in os.walk(os.path.join(src, "docs")):
        dirs.sort()
        out += sorted(os.path.relpath(os.path.join(root, f), src) for f in files if f.endswith(".md"))
    return out


def recorded_table(runs):
    out = ["| date | run | figures | what | commit | machine |", "|---|---|---|---|---|---|"]
    for r in sorted([r for r in runs if not r["name"].startswith("bench_")], key=lambda r: (r["date"], r["line"]),
                    reverse=True):
        figs = ", ".join(f"{k}={num(v)}" for k, v in r["fields"].items())
        out.append(f"| {r['date']} | `{r['name']}` | {esc(figs)} | {esc(r['note']) or '—'} | {r['commit']} | "
                   f"{esc(r['machine'])} |")
    return out


def fill(text, page, key, rows):
    rx = re.compile(r"(<!-- " + key + r": begin[^\n]*-->\n)(.*?)(<!-- " + key + r": end -->)", re.S)
    m = rx.search(text)
    if not m:
        raise Bad(f"{page}: no '<!-- {key}: begin ... -->' ... '<!-- {key}: end -->' markers")
    return text[:m.start()] + m.group(1) + "\n".join(rows) + "\n" + m.group(3) + text[m.end():]


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    src = args[0] if args else os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    try:
        runs = read_results(os.path.join(src, "tests", "bench", "results.tsv"))
        tables = {"bench-table": readme_table(runs), "bench-latest": latest_table(runs),
                  "bench-history": history_table(runs), "bench-recorded": recorded_table(runs)}
        stale = []
        for page in pages(src):
            path = os.path.join(src, page)
            with open(path, encoding="utf-8") as f:
                old = f.read()
            new = runs_tables(old, page, runs)
            for key in MARKERS.get(page, []):
                new = fill(new, page, key, tables[key])
            if new != old:
                stale.append(page)
                if not check:
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(new)
    except (Bad, OSError) as e:
        print(f"gen_bench_docs: {e}", file=sys.stderr)
        return 2
    if check and stale:
        print(f"gen_bench_docs: {', '.join(stale)}: the benchmark tables are not those of tests/bench/results.tsv; "
              "run python3 scripts/gen_bench_docs.py", file=sys.stderr)
        return 1
    print(f"gen_bench_docs: {len(runs)} runs, {len(benches(runs))} of them of {len(latest(runs))} benchmarks; "
          + (f"rewrote {', '.join(stale)}" if stale and not check else "the pages are up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
