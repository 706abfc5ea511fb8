#!/usr/bin/env python3
"""Seams between source files: a .c file outside tests/ never declares, by hand, a non-static
function that another file defines. Such prototypes belong in a header (a public one under
include/sluice/, or the module's private one: pipeline/internal.h, formats/example_priv.h,
...), so that the compiler checks the definition against the same declaration the callers see.

A prototype here is a statement at file scope that ends in `);`, names a function
(`type name(args);`) and is not static, a typedef or an initialised object. The file's own
forward declarations of functions it defines further down are allowed.

Usage: check_prototypes.py [SRC_DIR] (default: $SLUICE_SRC, else this script's parent).
Exits 0 when no file has such a prototype, 1 (listing FILE:LINE: name) when one does.
"""
import os
import re
import sys

from source_files import findings, report

DIRS = ["core", "formats", "pipeline", "train", "dist", "tools", "python", "examples"]
EXTS = (".c", ".cu")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
DECL_RE = re.compile(r"(" + IDENT + r")\s*\(")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "_Static_assert",
            "static_assert", "__attribute__", "_Alignas", "alignof", "_Alignof", "typeof",
            "__typeof__", "__extension__"}


def strip(text):
    """The text with comments, string and character literals and preprocessor lines blanked
    (newlines kept, so offsets give the same line numbers)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(c)
            i += 1
            continue
        out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
        i = j
    lines = "".join(out).split("\n")
    cont = False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith("#"):
            cont = line.endswith("\\")
            lines[k] = ""
    return "\n".join(lines)


def file_scope_statements(code):
    """(start offset, statement text, ends-with-brace) for each statement at brace depth 0:
    text up to a `;` or up to the `{` of a body (whose contents are skipped)."""
    stmts = []
    depth = 0
    paren = 0
    start = 0
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        elif c == "{":
            if depth == 0:
                stmts.append((start, code[start:i], True))
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        elif c == ";" and depth == 0 and paren == 0:
            stmts.append((start, code[start:i + 1], False))
            start = i + 1
        i += 1
    return stmts


def function_name(stmt):
    """The name a declaration or definition head `... name(args)` declares, else None.
    Function pointers (`type (*name)(args)`) and macro calls at file scope give None."""
    s = stmt.strip()
    if not s or "=" in s.split("(")[0]:
        return None
    m = None
    for m in DECL_RE.finditer(s):
        break
    if not m or m.group(1) in KEYWORDS:
        return None
    head = s[:m.start()].strip()
    # a declaration has a type before the name ("int", "sl_status", "void *", ...)
    if not head or not re.search(IDENT + r"[\s*]*$", head):
        return None
    if head.split()[0] in ("typedef", "struct", "union", "enum") and not head.endswith("*") \
            and len(head.split()) == 1:
        return None
    return m.group(1)


def check_file(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    code = strip(text)
    defined = set()
    decls = []
    for start, stmt, body in file_scope_statements(code):
        name = function_name(stmt)
        if not name:
            continue
        words = re.findall(IDENT, stmt.split(name + "(")[0] if (name + "(") in stmt else stmt)
        if body:
            defined.add(name)
            continue
        if not stmt.rstrip().endswith(");"):
            continue
        if "typedef" in words or "static" in words:
            continue
        line = code.count("\n", 0, start + len(stmt) - len(stmt.lstrip())) + 1
        decls.append((line, name))
    return [(line, name) for line, name in decls if name not in defined]


def declared_elsewhere(src, path):
    return ["%s:%d: %s() is declared here but defined in another file; declare it in a header both files include"
            % (os.path.relpath(path, src), line, name) for line, name in check_file(path)]


def main():
    src, bad, nfiles = findings(DIRS, EXTS, declared_elsewhere)
    return report("check_prototypes", bad, nfiles, "no .c files under %s" % src,
                  "%d prototype(s) of functions defined elsewhere, in %d files checked" % (len(bad), nfiles),
                  "%d files checked, no prototypes of functions defined elsewhere" % nfiles)


if __name__ == "__main__":
    sys.exit(main())
