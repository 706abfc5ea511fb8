#!/usr/bin/env python3
"""The reference pages list what the parsers accept, no more and no less.

The parsers' own tables are read from the sources:

  pipeline/from_config.c     OPS[]   pipeline statements and their key=value options
  pipeline/from_config_fn.c  FNS[]   the functions of `map` and their parameters
  train/model_config.c       DEFS[]  model layers and their options
  train/train_config.c       DEFS[]  train statements and their options
  dist/cluster.c             known[] cluster statements; the options `task` reads
                                     (sl_cfg_opt) and CURVE_OPTS[] for `curve`

and compared with the tables of docs/reference/: each page's "Statements" (or "Layers",
"Functions") table must name every statement, and its "... options" (or "Function
parameters") table must have one row per (statement, option) pair. A pair or statement
the parser accepts that no row names fails ("not documented"), and so does a row that names
one the parser does not accept ("documented but not accepted").

The check also shows it can fail: on a copy of each page with the first row of its options
table deleted, it must report exactly that (statement, option) pair as not documented.

Usage: check_reference.py [SRC_DIR] (default: $SLUICE_SRC, else this script's parent).
Exits 0 when the pages and the parsers agree, 1 listing each difference, 2 when a table
cannot be found in the sources or the pages (the check would otherwise pass on nothing).
"""
import os
import re
import shutil
import sys
import tempfile


class Missing(Exception):
    pass


# ---- the C tables -------------------------------------------------------------------------

def c_strings(text):
    """The C string literals of text, adjacent ones joined, with escapes undone."""
    out, i, cur, joined = [], 0, None, False
    while i < len(text):
        c = text[i]
        if c == '"':
            j, buf = i + 1, []
            while text[j] != '"':
                if text[j] == "\\":
                    buf.append(text[j + 1])
                    j += 2
                else:
                    buf.append(text[j])
                    j += 1
            s = "".join(buf)
            if joined and out:
                out[-1] += s
            else:
                out.append(s)
            joined = True
            i = j + 1
            continue
        if not c.isspace():
            joined = False
        i += 1
    return out


def c_array(path, name):
    """The entries of `... NAME[] = { {...}, {...} };` in path, each as its text."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    m = re.search(r"\b" + re.escape(name) + r"\[[^\]]*\]\s*=\s*\{", src)
    if not m:
        raise Missing(f"{path}: no table {name}[]")
    i, depth, start, entries = m.end(), 1, None, []
    instr = False
    while depth:
        c = src[i]
        if instr:
            if c == "\\":
                i += 1
            elif c == '"':
                instr = False
        elif c == '"':
            instr = True
        elif c == "{":
            depth += 1
            if depth == 2:
                start = i
        elif c == "}":
            if depth == 2:
                entries.append(src[start + 1:i])
            depth -= 1
        i += 1
    return src[m.end():i - 1], entries


def name_and_options(entry):
    """An entry {"name", ..., {"opt", ...}, ...}: its first string and the strings of its
    first nested brace group."""
    name = c_strings(entry)[0]
    g = re.search(r"\{([^{}]*)\}", entry)
    return name, [s for s in c_strings(g.group(1))] if g else []


def table(path, name):
    _, entries = c_array(path, name)
    out = {}
    for e in entries:
        n, opts = name_and_options(e)
        out[n] = opts
    if not out:
        raise Missing(f"{path}: {name}[] has no entries")
    return out


def cluster_table(path):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    m = re.search(r"known\[\]\s*=\s*\{([^}]*)\}", src)
    if not m:
        raise Missing(f"{path}: no known[] list of cluster statements")
    out = {s: [] for s in c_strings(m.group(1))}
    task = re.search(r'strcmp\(st->name, "task"\) == 0\) \{(.*?)\n        \} else if', src, re.S)
    if not task:
        raise Missing(f"{path}: the `task` statement's branch is not where this check looks")
    out["task"] = re.findall(r'sl_cfg_opt\(st, "(\w+)"\)', task.group(1))
    m = re.search(r"CURVE_OPTS\[[^\]]*\]\s*=\s*\{([^}]*)\}", src)
    if not m:
        raise Missing(f"{path}: no CURVE_OPTS[]")
    out["curve"] = c_strings(m.group(1))
    return out


# ---- the pages ----------------------------------------------------------------------------

def md_table(path, heading):
    """The rows (lists of cells) of the first table under `## HEADING` of the page."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        i = next(k for k, l in enumerate(lines) if re.match(r"^##\s+" + re.escape(heading) + r"\s*$", l))
    except StopIteration:
        raise Missing(f"{path}: no '## {heading}' section")
    i += 1
    while i < len(lines) and not lines[i].startswith("|"):
        if lines[i].startswith("#"):
            raise Missing(f"{path}: '## {heading}' has no table")
        i += 1
    rows = []
    for l in lines[i + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", l.strip())[1:-1]]
        rows.append(cells)
    return rows, i + 3


def code_words(cell):
    """The first word of each `code` span of a cell: `take N` / `skip N` -> take, skip."""
    return [re.match(r"[\w]+", c).group(0) for c in re.findall(r"`([^`]+)`", cell) if re.match(r"\w", c)]


def documented(path, stmt_heading, opt_heading):
    stmts, _ = md_table(path, stmt_heading)
    names = {}
    for n, row in enumerate(stmts):
        for w in code_words(row[0]):
            names.setdefault(w, n)
    opts, first = md_table(path, opt_heading)
    pairs = {}
    for n, row in enumerate(opts):
        a, b = code_words(row[0]), code_words(row[1])
        if len(a) != 1 or len(b) != 1:
            raise Missing(f"{path}:{first + n}: a row of '## {opt_heading}' must start with `statement` | `option`")
        pairs.setdefault((a[0], b[0]), first + n)
    return names, pairs


# ---- the comparison -----------------------------------------------------------------------

def compare(page, accepted, names, pairs, what, opt_word):
    bad = []
    for s in accepted:
        if s not in names:
            bad.append(f"{page}: {what} '{s}' is accepted but not documented (no row of its table names it)")
    for s in names:
        if s not in accepted:
            bad.append(f"{page}: {what} '{s}' is documented but not accepted")
    want = {(s, o) for s, opts in accepted.items() for o in opts}
    for s, o in sorted(want - set(pairs)):
        bad.append(f"{page}: {opt_word} '{o}' of '{s}' is accepted but has no row")
    for s, o in sorted(set(pairs) - want):
        bad.append(f"{page}:{pairs[(s, o)]}: {opt_word} '{o}' of '{s}' is documented but not accepted")
    return bad


CHECKS = [
    # page, sections (statements, options), source, table, what, option word
    ("docs/reference/pipeline.md", ("Statements", "Statement options"), "pipeline/from_config.c", "OPS", "statement", "option"),
    ("docs/reference/pipeline.md", ("Functions", "Function parameters"), "pipeline/from_config_fn.c", "FNS", "function", "parameter"),
    ("docs/reference/model.md", ("Layers", "Layer options"), "train/model_config.c", "DEFS", "layer", "option"),
    ("docs/reference/train.md", ("Statements", "Options"), "train/train_config.c", "DEFS", "statement", "option"),
    ("docs/reference/cluster.md", ("Statements", "Options"), "dist/cluster.c", None, "statement", "option"),
]


def deleting_a_row_fails(page_path, sh, oh, accepted, what, ow):
    """A copy of the page without the first row of its options table must fail with that
    pair: the check does not pass on a table it cannot see."""
    rows, first = md_table(page_path, oh)
    with open(page_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    gone = lines[first - 1]
    del lines[first - 1]
    d = tempfile.mkdtemp(prefix="sluice-check-reference-")
    try:
        copy = os.path.join(d, os.path.basename(page_path))
        with open(copy, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        names, pairs = documented(copy, sh, oh)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    s, o = code_words(rows[0][0])[0], code_words(rows[0][1])[0]
    got = compare("copy", accepted, names, pairs, what, ow)
    want = [f"copy: {ow} '{o}' of '{s}' is accepted but has no row"]
    return [] if got == want else [f"{page_path}: deleting the row '{gone[:60]}...' was not reported as {want[0]!r}: "
                                   f"the check reports {got}"]


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                          os.environ.get("SLUICE_SRC") or os.path.join(os.path.dirname(__file__), ".."))
    bad, counted = [], []
    try:
        for page, (sh, oh), source, tname, what, ow in CHECKS:
            path = os.path.join(src, source)
            accepted = cluster_table(path) if tname is None else table(path, tname)
            names, pairs = documented(os.path.join(src, page), sh, oh)
            bad += compare(page, accepted, names, pairs, what, ow)
            bad += deleting_a_row_fails(os.path.join(src, page), sh, oh, accepted, what, ow)
            counted.append(f"{len(accepted)} {what}s and {sum(len(v) for v in accepted.values())} {ow}s of {source}")
    except Missing as e:
        print(f"check_reference: {e}")
        return 2
    for b in bad:
        print(b)
    print("check_reference: " + "; ".join(counted) + (f": {len(bad)} differences" if bad else ": all documented"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
