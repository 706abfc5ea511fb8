"""The source tree that the tests/check_*.py scripts read: its folder (the first argument,
else $SLUICE_SRC, else this script's parent) and its files under some folders with some
endings, in a stable order; findings() runs a check over them and report() prints what it
found. A module, not a check: tests/CMakeLists.txt registers only check_*.py as tests."""
import os
import sys


def source_dir():
    return sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "SLUICE_SRC", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def source_files(src, dirs, exts):
    """The paths of the files ending in one of exts under src/DIR for each DIR, sorted."""
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(os.path.join(src, d)):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith(exts):
                    yield os.path.join(dirpath, fn)


def findings(dirs, exts, check_one):
    """Runs check_one(src, path) on each source file (source_dir(), source_files()); returns
    (src, the lines the calls returned, in order, the number of files read)."""
    src = source_dir()
    bad = []
    nfiles = 0
    for path in source_files(src, dirs, exts):
        nfiles += 1
        bad.extend(check_one(src, path))
    return src, bad, nfiles


def report(name, bad, nfiles, none_msg, bad_msg, ok_msg):
    """Prints what check NAME found and returns its exit status: 1 with NONE_MSG on stderr
    when it read no file (nfiles 0); 1 after each line of BAD and BAD_MSG when BAD is not
    empty; else 0 after OK_MSG. Each message is printed after "NAME: "."""
    if nfiles == 0:
        print("%s: %s" % (name, none_msg), file=sys.stderr)
        return 1
    for b in bad:
        print(b)
    if bad:
        print("%s: %s" % (name, bad_msg))
        return 1
    print("%s: %s" % (name, ok_msg))
    return 0
