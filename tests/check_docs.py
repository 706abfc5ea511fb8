#!/usr/bin/env python3
"""The documentation holds together: README.md and every page under docs/.

- every relative link resolves: `[text](path)` to a file or folder of the repository,
  `[text](path#anchor)` and `[text](#anchor)` to a heading of that page (GitHub's anchors:
  lower case, punctuation dropped, spaces as hyphens, -1, -2 ... for repeats);
- every page under docs/ is reachable: README.md or another page links to it;
- README.md is at most README_MAX_LINES lines (the detail lives in docs/);
- the benchmark tables are those that tests/bench/results.tsv makes
  (scripts/gen_bench_docs.py --check);
- a measured figure in prose — a rate (examples/s, images/s, MB/s, GFLOP/s, KiB/step,
  ms/step, ...) or an accuracy-like 0.5000-0.9999 — is one the results file holds, or sits
  in a paragraph that names the test that makes it (`test_...`); the reference pages (their
  defaults and ranges) and the generated tables are not prose.

Links inside fenced blocks and inline code are not links. Absolute URLs (https:, mailto:)
are not checked: the suite reaches no network.

Usage: check_docs.py [SRC_DIR] (default: $SLUICE_SRC, else this script's parent).
Exits 0 when all hold, 1 listing PAGE:LINE: what is wrong.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from gen_bench_docs import pages  # noqa: E402  (the one list of pages)

README_MAX_LINES = 250
FIGURE = re.compile(r"\b\d[\d,.]*\s?(?:examples/s|images/s|elements/s|records/s|batches/s|steps/s|[KMGT]B/s|"
                    r"GFLOP/s|TFLOP/s|KiB/step|ms/step)|\b0\.[5-9]\d{2,3}\b(?![\]\d])")
GENERATED = re.compile(r"<!-- bench-[a-z]+: (begin|end)")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose_lines(text):
    """(line number, line with inline code blanked) for every line outside fenced blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence[0]) and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if fence is None:
            yield n, re.sub(r"(`+)(?:(?!\1).)+\1", lambda c: " " * len(c.group(0)), line)


def figures(page, text, results):
    """Measured figures of the page's prose that the results file does not hold."""
    out, gen = [], False
    if page.startswith("docs" + os.sep + "reference" + os.sep):
        return out
    lines = list(prose_lines(text))
    para, start = {}, 0  # each line's paragraph: the lines between blank ones
    for k, (n, line) in enumerate(lines):
        if not line.strip():
            start = k + 1
        para[n] = start
    tested = {}
    raw = text.split("\n")
    for n, _ in lines:
        if re.search(r"\btest_\w+", raw[n - 1]):  # the test's name is usually in code
            tested[para[n]] = True
    for n, line in lines:
        m = GENERATED.search(line)
        if m:
            gen = m.group(1) == "begin"
            continue
        if gen or tested.get(para[n]):
            continue  # a paragraph that names the test making its figures
        for f in FIGURE.finditer(line):
            value = re.match(r"[\d,.]+", f.group(0)).group(0).replace(",", "").rstrip(".")
            if not re.search(r"(?<![\d.])" + re.escape(value) + r"(?![\d])", results):
                out.append(f"{page}:{n}: the figure '{f.group(0)}' is in no recorded run (tests/bench/results.tsv): "
                           "record the run that measured it, or say it without the figure")
    return out


def slug(title):
    """GitHub's anchor for a heading's text."""
    t = re.sub(r"<[^>]+>", "", title)
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", t)  # a link in a heading: its text
    t = t.replace("`", "").strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    fence = None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            fence = None if fence else m.group(1)
            continue
        h = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            s = slug(h.group(1))
            k = seen.get(s, 0)
            seen[s] = k + 1
            out.add(s if k == 0 else f"{s}-{k}")
    return out


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                          os.environ.get("SLUICE_SRC") or os.path.join(os.path.dirname(__file__), ".."))
    bad, texts, linked, nlinks = [], {}, set(), 0
    for page in pages(src):
        with open(os.path.join(src, page), encoding="utf-8") as f:
            texts[page] = f.read()
    cache = {}
    for page, text in texts.items():
        for n, line in prose_lines(text):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto:: not checked here
                nlinks += 1
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                full = os.path.join(src, dest)
                if not os.path.exists(full):
                    bad.append(f"{page}:{n}: link to {target}: {dest} does not exist")
                    continue
                if dest.endswith(".md"):
                    linked.add(dest)
                if frag:
                    if not dest.endswith(".md") or not os.path.isfile(full):
                        bad.append(f"{page}:{n}: link to {target}: an anchor into {dest}, which is not a page")
                        continue
                    if dest not in cache:
                        with open(full, encoding="utf-8") as f:
                            cache[dest] = anchors(f.read())
                    if frag not in cache[dest]:
                        bad.append(f"{page}:{n}: link to {target}: {dest} has no heading with the anchor #{frag}")
    with open(os.path.join(src, "tests", "bench", "results.tsv"), encoding="utf-8") as f:
        results = f.read().replace(",", "")
    for page, text in texts.items():
        bad += figures(page, text, results)
    for page in texts:
        if page != "README.md" and page not in linked:
            bad.append(f"{page}:1: no page links to it (README.md or another page should)")
    n = texts["README.md"].count("\n")
    if n > README_MAX_LINES:
        bad.append(f"README.md:{README_MAX_LINES + 1}: {n} lines, at most {README_MAX_LINES}: move detail into docs/")
    r = subprocess.run([sys.executable, os.path.join(src, "scripts", "gen_bench_docs.py"), "--check", src],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        bad.append(r.stdout.strip())
    for b in bad:
        print(b)
    print(f"check_docs: {len(texts)} pages, {nlinks} relative links, README.md {n} lines: "
          + (f"{len(bad)} problems" if bad else "all hold"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
