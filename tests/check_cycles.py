#!/usr/bin/env python3
"""Seams between source files, in the built library: no two files of a module (core,
formats, pipeline, train, dist) call each other. Each file's defined and undefined symbols
come from its object file (nm); file A uses file B when A refers to a symbol B defines. A
pair that uses each other is a circle: a helper lives in the wrong file (move it to the
file it belongs to, or to a third file both use).

Usage: check_cycles.py [SRC_DIR [OBJ_DIR]]; OBJ_DIR defaults to CMakeFiles/sluice_obj.dir
under the working directory (ctest runs this in the build directory). Exits 0 when there is
no circle, 1 listing each pair and the symbols each side uses, 77 (skipped) without nm or
without the objects.
"""
import os
import shutil
import subprocess
import sys

MODULES = ["core", "formats", "pipeline", "train", "dist"]

# Known circles (none).
ALLOWED = set()


def symbols(objs):
    """{obj: (defined, undefined)} for the object files objs, from one nm run over all of
    them (an nm process per file took 0.1 s each, 9 s for the library; one takes 0.3 s):
    nm prints each file's symbols after a blank line and a line "OBJ:"."""
    out = subprocess.run(["nm"] + objs, capture_output=True, text=True, check=True).stdout
    syms = {obj: (set(), set()) for obj in objs}
    cur = objs[0] if len(objs) == 1 else None  # one file: no "OBJ:" line
    for line in out.splitlines():
        if line.endswith(":") and line[:-1] in syms:
            cur = line[:-1]
            continue
        parts = line.split()
        if cur is None or not parts:
            continue
        defined, undefined = syms[cur]
        if len(parts) == 3 and parts[1] in "TDRBVW":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
    return syms


def main():
    objdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.getcwd(), "CMakeFiles", "sluice_obj.dir")
    if not shutil.which("nm") or not os.path.isdir(objdir):
        print("check_cycles: skipped (no nm, or no objects in %s)" % objdir)
        return 77
    objs = []
    for m in MODULES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(objdir, m)):
            objs += [os.path.join(dirpath, fn) for fn in filenames if fn.endswith(".o")]
    defs, uses = {}, {}
    for obj, (d, u) in (symbols(objs) if objs else {}).items():
        src = os.path.relpath(obj, objdir)[:-2]  # pipeline/ops/batch.c
        defs[src], uses[src] = d, u
    if not defs:
        print("check_cycles: skipped (no object files under %s)" % objdir)
        return 77
    owner = {}
    for f, d in defs.items():
        for s in d:
            owner[s] = f
    bad = []
    for a in sorted(uses):
        for b in sorted(defs):
            if a >= b or a.split("/")[0] != b.split("/")[0]:
                continue
            ab = sorted(s for s in uses[a] if owner.get(s) == b)
            ba = sorted(s for s in uses[b] if owner.get(s) == a)
            if ab and ba and (a, b) not in ALLOWED:
                bad.append("%s <-> %s: %s uses %s; %s uses %s" % (a, b, a, ", ".join(ab[:4]), b, ", ".join(ba[:4])))
    for line in bad:
        print(line)
    if bad:
        print("check_cycles: %d pair(s) of files call each other, in %d files" % (len(bad), len(defs)))
        return 1
    print("check_cycles: %d files, no two of a module call each other" % len(defs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
