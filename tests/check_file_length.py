#!/usr/bin/env python3
"""Source files stay short enough to read: no file under the library, tool and binding
folders is longer than MAX_LINES lines, and none under train/ (the module most often changed:
the model, its backends and the training loop) longer than TRAIN_MAX_LINES. A file that grows past it is split along its seams
(a private header for what the parts share), not trimmed.

Usage: check_file_length.py [SRC_DIR] (default: $SLUICE_SRC, else this script's parent).
Exits 0 when every file fits, 1 (listing FILE: N lines) when one does not.
"""
import os
import sys

from source_files import findings, report

MAX_LINES = 1200
TRAIN_MAX_LINES = 800
DIRS = ["core", "formats", "pipeline", "train", "dist", "tools", "python", "include", "examples"]
EXTS = (".c", ".h", ".cu", ".cuh", ".py")


def too_long(src, path):
    with open(path, "rb") as f:
        n = f.read().count(b"\n")
    rel = os.path.relpath(path, src)
    most = TRAIN_MAX_LINES if rel.split(os.sep)[0] == "train" else MAX_LINES
    return ["%s: %d lines (at most %d)" % (rel, n, most)] if n > most else []


def main():
    src, bad, nfiles = findings(DIRS, EXTS, too_long)
    return report("check_file_length", bad, nfiles, "no source files under %s" % src,
                  "%d of %d files are too long; split them along their seams" % (len(bad), nfiles),
                  "%d files, none over %d lines (%d in train/)" % (nfiles, MAX_LINES, TRAIN_MAX_LINES))


if __name__ == "__main__":
    sys.exit(main())
