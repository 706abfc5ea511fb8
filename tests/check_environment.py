#!/usr/bin/env python3
"""The library never reads the process environment: no call of getenv or secure_getenv and no
use of `environ` in its modules (core/, formats/, pipeline/, train/, dist/). Choices a user
makes through environment variables (the GEMM, the job id, the cluster) are read by the tools
and passed in through options or an explicit envp, so a program that embeds the library
decides what it sees, and a test gives each call the environment it needs.

Usage: check_environment.py [SRC_DIR] (default: $SLUICE_SRC, else this script's parent).
Exits 0 when no library file reads the environment, 1 (listing FILE:LINE: what) when one does.
"""
import os
import re
import sys

from check_prototypes import strip
from source_files import findings, report

DIRS = ["core", "formats", "pipeline", "train", "dist"]
EXTS = (".c", ".h", ".cu", ".cuh")
READ_RE = re.compile(r"\b(secure_getenv|getenv)\s*\(|\b(environ|__environ)\b")


def reads_env(src, path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip(f.read())
    out = []
    for m in READ_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append("%s:%d: %s" % (os.path.relpath(path, src), line, m.group(1) or m.group(2)))
    return out


def main():
    src, bad, nfiles = findings(DIRS, EXTS, reads_env)
    return report("check_environment", bad, nfiles, "no library sources under %s" % src,
                  "%d places in the library read the environment; read it in the tool and pass "
                  "the value in" % len(bad),
                  "%d library files, none reads the environment" % nfiles)


if __name__ == "__main__":
    sys.exit(main())
