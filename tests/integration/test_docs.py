#!/usr/bin/python3
"""Every example of the documentation runs: README.md and every page under docs/.

Reads README.md, then each docs/**/*.md in path order, finds their fenced blocks (with their
line numbers) and checks each one:

  ```sh        a shell block: run with `bash -e -o pipefail` in a work folder (below); it must
               exit 0.
  ``` (none)   a console transcript when its first line starts with `$ `: each `$ COMMAND`
               is run (bash, in the work folder) and must exit 0; with the `exact` marker the
               lines shown after it must equal the command's output instead (stdout and
               stderr merged, compared as sorted lines: the two streams interleave
               differently through a pipe; durations such as `0.0 s` are not compared),
               whatever its exit status.
               Otherwise a config of the config language, checked by the project's parser
               (libsluice's sl_cfg_parse_file, through ctypes); then each `pipeline NAME`
               block must build and yield an element (`sluice-stats --pipeline NAME --peek
               1`), and a `train` block must train (`sluice-train --set train.steps=3`: the
               last of `epochs` and `steps` wins), on examples/fashion.sl's pipelines when
               the block has none.
  other        (cmake, ...) must carry a marker.

Every examples/ file a page names must exist; each .sl of them must parse and its
pipelines yield an element.

A marker is an HTML comment on the line before the block's opening fence, invisible on the
rendered page:

  <!-- readme-test: skip (REASON) -->        not run; counted and printed with REASON
  <!-- readme-test: usage -->                a synopsis: every --option it names must be in
                                             the tool's --help (`sluice-record CMD --help`)
  <!-- readme-test: exact -->                a transcript whose output must match
  <!-- readme-test: append ARGS (REASON) --> run each command with ARGS appended (shortened
                                             trainings: `--set train.steps=40`)
  <!-- readme-test: syntax (REASON) -->       a config fragment: it must parse, nothing more

The work folder is what a user has after `bash scripts/main.sh`: `build` (a link to this
build), a copy of `examples/`, Fashion-MNIST converted into `data/fashion/` (8+8 shards,
2 s), `pets_examples.record` (the damaged sample of tests/data), `photos/` (two class
folders of 100 JPEGs each, with a text file and a cut JPEG) and its conversion for
examples/imagenet_resnet.sl in `data/imagenet/`, the build's bin/ on PATH,
`python3` the tests' Python ($PYTHON, Debian's /usr/bin/python3), and HOME inside it.
Lines `bash scripts/main.sh` and `cmake --build build ...` of a block are taken as done
(the work folder is that state; they would rebuild or re-download). Blocks run in order in
the one work folder (the pkg-config block uses the install the block before it made in
HOME; pages run one after another in the one folder), but the run folder `runs/` is
removed before each block. `sluice-launch -n ...` gets
`--port-base` of this test's ports (28000 + (pid % 40) * 100 + 10..19, in the block lib.sh
leaves to new scripts) instead of the default 29500. A block that fails because an
optional Python module (torch) is missing is counted as skipped. Took 67 s on the 2-core
machine with other builds running, most of it the three shortened trainings.

An unmarked example that fails fails the test, naming PAGE:LINE (`test_docs.py
docs/tools/sluice-train.md:221 ...` runs only those blocks). Exit 0 when all pass,
1 on any failure, 77 when the tools, the Fashion-MNIST files or the plain build (a sanitizer
build's libsluice.so cannot be loaded by ctypes) are missing.
"""
import base64
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("SLUICE_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.abspath(os.environ.get("SLUICE_BIN", "build/bin"))
BUILD = os.path.dirname(BIN)
FM = "/usr/share/datasets/fashion-mnist"
PETS = os.path.join(SRC, "tests/data/tfrecord-samples/corrupt/"
                         "models__research__object_detection__test_data__pets_examples.record")
TOOLS = ["sluice-stats", "sluice-record", "sluice-train", "sluice-launch"]
BLOCK_TIMEOUT = 60
PORT_BASE = 28000 + (os.getpid() % 40) * 100 + 10
sys.path.insert(0, os.path.join(SRC, "scripts"))
from gen_bench_docs import pages as doc_pages  # noqa: E402  (the one list of pages)

MARKER = re.compile(r"^<!--\s*readme-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
PROVIDED = re.compile(r"^\s*(bash scripts/main\.sh|cmake --build build)\b")


def skip_all(why):
    print(f"skipped: {why}")
    sys.exit(77)


# ---- pages -> blocks ------------------------------------------------------------------

class Block:
    def __init__(self, page, line, lang, body, marker):
        self.page, self.line, self.lang, self.body = page, line, lang, body
        self.kind, self.arg = marker if marker else (None, "")

    def reason(self):
        m = re.search(r"\((.*)\)\s*$", self.arg)
        return m.group(1) if m else self.arg


def pages():
    """README.md, then every page under docs/ in path order (relative to SRC)."""
    return doc_pages(SRC)


def read_blocks(page):
    with open(os.path.join(SRC, page), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^(```+)\s*([\w+-]*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        if j == len(lines):
            raise SystemExit(f"{page}:{start + 1}: block never closed")
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = None
        mm = MARKER.match(lines[k]) if k >= 0 else None
        if mm:
            marker = (mm.group(1), mm.group(2))
        blocks.append(Block(page, start + 1, lang, lines[start + 1:j], marker))
        i = j + 1
    return blocks


# ---- the work folder ----------------------------------------------------------------------

def make_workdir():
    t = tempfile.mkdtemp(prefix="sluice-readme-")
    os.symlink(BUILD, os.path.join(t, "build"))
    os.symlink(os.path.join(SRC, "tests"), os.path.join(t, "tests"))  # examples read tests/data
    shutil.copytree(os.path.join(SRC, "examples"), os.path.join(t, "examples"))
    if os.path.exists(PETS):
        os.symlink(PETS, os.path.join(t, "pets_examples.record"))
    os.makedirs(os.path.join(t, "home"))
    os.makedirs(os.path.join(t, "pybin"))  # `python3` is the Python the tests use (Debian's)
    os.symlink(os.environ.get("PYTHON", "/usr/bin/python3"), os.path.join(t, "pybin", "python3"))
    r = subprocess.run([os.path.join(BIN, "sluice-record"), "convert", "fashion-mnist",
                        os.path.join(t, "data/fashion"), "--shards", "8"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        raise SystemExit(f"FAIL: converting Fashion-MNIST for the examples:\n{r.stdout}")
    make_photos(t)
    make_imagenet(t)
    return t


def make_imagenet(t):
    """data/imagenet/: examples/imagenet_resnet.sl's TFRecords, from photos/ (the train split
    twice over, as train-* and train-extra-*, so that it holds a batch of 256; validation-*)."""
    tool = os.path.join(BIN, "sluice-record")
    for split in ("train", "train-extra", "validation"):
        subprocess.run([tool, "convert", "images", os.path.join(t, "photos"), os.path.join(t, "data", "imagenet"),
                        "--shards", "1", "--split", split], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def make_photos(t):
    """photos/cats/ and photos/dogs/, 100 JPEGs each (Fashion-MNIST images), a text file in
    cats and a JPEG cut inside its header in dogs: the folder `convert images` shows."""
    rec = os.path.join(t, "photos-rec")
    tool = os.path.join(BIN, "sluice-record")
    subprocess.run([tool, "convert", "fashion-mnist", rec, "--shards", "1", "--jpeg", "--limit", "200"],
                   check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run([tool, "cat", "--json", os.path.join(rec, "train-00000-of-00001.tfrecord")],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    for i, line in enumerate(out.splitlines()):
        d = os.path.join(t, "photos", "cats" if i < 100 else "dogs")
        os.makedirs(d, exist_ok=True)
        jpeg = base64.b64decode(json.loads(line)["features"]["feature"]["image"]["bytesList"]["value"][0])
        with open(os.path.join(d, f"{i:03d}.jpg"), "wb") as f:
            f.write(jpeg)
        if i == 0:
            cut = jpeg[:10]  # SOI and part of APP0: "jpeg: bad header: 0 x 0 image"
    with open(os.path.join(t, "photos", "dogs", "cut.jpg"), "wb") as f:
        f.write(cut)
    with open(os.path.join(t, "photos", "cats", "notes.txt"), "w") as f:
        f.write("not a photo\n")
    shutil.rmtree(rec)


def env_for(t):
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([BIN, os.path.join(t, "pybin"), env.get("PATH", "")])
    env["HOME"] = os.path.join(t, "home")
    for k in ("TF_CONFIG", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PYTHONPATH"):
        env.pop(k, None)
    return env


def clean_runs(t):
    shutil.rmtree(os.path.join(t, "runs"), ignore_errors=True)


def sh(t, script, timeout=BLOCK_TIMEOUT, stop_on_error=True):
    """Run a bash script in t: (exit status, output). stop_on_error: bash -e. The script runs
    in a session of its own, so a timeout kills everything it started (a launcher's workers
    too), and no process of one block holds ports or files into the next."""
    p = subprocess.Popen(["bash"] + (["-e"] if stop_on_error else []) + ["-o", "pipefail", "-c", script],
                         cwd=t, env=env_for(t), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        return 124, (out or b"").decode("utf-8", "replace") + f"\n(killed after {timeout} s)"
    try:  # a block that exited leaves nothing running behind it
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return rc, out.decode("utf-8", "replace")


def logical_commands(body):
    """Join `\\`-continued lines; drop blank and comment-only lines."""
    cmds, cur = [], ""
    for ln in body:
        if cur:
            cur += " " + ln.strip()
        else:
            if not ln.strip() or ln.lstrip().startswith("#"):
                continue
            cur = ln
        if cur.rstrip().endswith("\\"):
            cur = cur.rstrip()[:-1].rstrip()
            continue
        cmds.append(cur)
        cur = ""
    if cur:
        cmds.append(cur)
    return cmds


def adapt(cmd, blk):
    """A command as the test runs it: --port-base for sluice-launch jobs, the marker's ARGS."""
    cmd = re.sub(r"((?:^|\s)(?:\S*/)?sluice-launch)(?=\s+-n\s)", rf"\1 --port-base {PORT_BASE}", cmd)
    if blk.kind == "append":
        args = re.sub(r"\s*\(.*\)\s*$", "", blk.arg)
        code, sep, comment = cmd.partition(" #")
        cmd = code.rstrip() + " " + args + (sep + comment if sep else "")
    return cmd


DURATION = re.compile(r"\b\d+(\.\d+)? s\b")  # "in 0.0 s": how long it took is not compared
MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '(torch|numpy)'")


# ---- the checks ---------------------------------------------------------------------------

class Result(Exception):
    pass


class Failed(Result):
    pass


class Skipped(Result):
    pass


def run_or_fail(t, script, blk, what, stop_on_error=True):
    rc, out = sh(t, script, stop_on_error=stop_on_error)
    m = MISSING_MODULE.search(out)
    if rc and m:
        raise Skipped(f"needs the Python module {m.group(1)}, not installed here")
    if rc:
        tail = "\n".join("    " + x for x in out.rstrip().split("\n")[-15:])
        raise Failed(f"{what} exited {rc}:\n    $ {script.strip()}\n{tail}")
    return out


def check_sh(t, blk):
    kept, provided = [], []
    for ln in blk.body:
        (provided if PROVIDED.match(ln) else kept).append(ln)
    script = "\n".join(adapt(c, blk) for c in logical_commands(kept)) + "\n"
    if "PYTHONPATH=build/python" in script and not os.path.isdir(os.path.join(BUILD, "python", "sluice")):
        raise Skipped("needs the Python module, not built here (-DSLUICE_PYTHON)")
    out = run_or_fail(t, script, blk, "the block")
    note = f" (taken as done: {'; '.join(p.split('#')[0].strip() for p in provided)})" if provided else ""
    return f"ran the block{note}", out


def check_transcript(t, blk):
    steps, cur = [], None
    for ln in blk.body:
        if ln.startswith("$ "):
            cur = [ln[2:], []]
            steps.append(cur)
        elif cur is not None:
            cur[1].append(ln)
    for cmd, want in steps:
        cmd = adapt(cmd, blk)
        if blk.kind == "exact":  # the output shown is the check (a failing command's too)
            rc, out = sh(t, cmd, stop_on_error=False)
        else:
            out = run_or_fail(t, cmd, blk, "command", stop_on_error=False)  # `CMD; echo $?` as typed
        if blk.kind == "exact":
            got = out.rstrip("\n").split("\n") if out.strip() else []
            got, want = [DURATION.sub("N s", x) for x in got], [DURATION.sub("N s", x) for x in want]
            if sorted(got) != sorted(want):
                missing = [x for x in want if x not in got]
                extra = [x for x in got if x not in want]
                raise Failed(f"`{cmd}` printed other lines than the page shows:\n"
                             + "".join(f"    page only: {x}\n" for x in missing)
                             + "".join(f"    output only: {x}\n" for x in extra))
    return f"ran {len(steps)} commands" + (", output as shown" if blk.kind == "exact" else ""), ""


def cfg_parse(lib, path):
    cfg = ctypes.c_void_p()
    s = lib.sl_cfg_parse_file(path.encode(), ctypes.byref(cfg))
    if s:
        raise Failed(f"does not parse: {lib.sl_errmsg().decode('utf-8', 'replace')}")
    lib.sl_cfg_free(cfg)


def check_config(t, blk, lib):
    text = "\n".join(blk.body) + "\n"
    slug = re.sub(r"\W+", "-", os.path.splitext(blk.page)[0]).lower()
    path = os.path.join(t, "examples", f"doc-{slug}-{blk.line}.sl")
    with open(path, "w") as f:
        f.write(text)
    cfg_parse(lib, path)
    done = ["parses"]
    if blk.kind == "syntax":
        return "parses (a fragment: syntax only)", ""
    names = re.findall(r"^\s*pipeline\s+(\w+)\s*\{", text, re.M)
    for name in names:
        run_or_fail(t, f"sluice-stats {shlex.quote(path)} --pipeline {name} --peek 1", blk, f"pipeline '{name}'")
    if names:
        done.append(f"pipeline{'s' if len(names) > 1 else ''} {', '.join(names)} yield{'' if len(names) > 1 else 's'} an element")
    if re.search(r"^\s*train\s*\{", text, re.M):
        if not names:
            with open(os.path.join(SRC, "examples", "fashion.sl")) as f:
                text = f.read() + "\n" + text
            with open(path, "w") as f:
                f.write(text)
        clean_runs(t)
        run_or_fail(t, f"sluice-train {shlex.quote(path)} --set train.steps=3 "
                       f"--run-dir runs/doc-{blk.line} --quiet", blk, "training")
        done.append("trains 3 steps" + ("" if names else " (on examples/fashion.sl's pipelines)"))
    return ", ".join(done), ""


def check_named_examples(t, lib):
    """Every examples/ file a page names exists (but those a page's block writes, `cat >
    examples/NAME`); each config parses and its pipelines yield an element (the blocks train
    fashion_mlp.sl; fashion_cnn.sl is only named)."""
    named, made = {}, set()
    for page in pages():
        with open(os.path.join(SRC, page), encoding="utf-8") as f:
            text = f.read()
        for name in re.findall(r"examples/[\w-]+\.\w+", text):
            named.setdefault(name, page)
        made.update(re.findall(r">>?\s*(examples/[\w-]+\.\w+)", text))  # a page's block writes it
    for name in made:
        named.pop(name, None)
    names = sorted(named)
    for name in names:
        path = os.path.join(t, name)
        if not os.path.exists(path):
            raise Failed(f"{named[name]} names {name}, which does not exist")
        if name.endswith(".sl"):
            cfg_parse(lib, path)
            with open(path) as f:
                for pipe in re.findall(r"^\s*pipeline\s+(\w+)\s*\{", f.read(), re.M):
                    run_or_fail(t, f"sluice-stats {name} --pipeline {pipe} --peek 1", None, f"{name}: pipeline '{pipe}'")
    return f"{len(names)} named files exist: {', '.join(names)}; the configs parse and their pipelines yield"


def tool_help(tool, sub, cache={}):
    key = (tool, sub)
    if key not in cache:
        argv = [os.path.join(BIN, tool)] + ([sub] if sub else []) + ["--help"]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode:
            raise Failed(f"`{' '.join(argv[1:])}` exited {r.returncode}")
        cache[key] = r.stdout
    return cache[key]


def check_usage(t, blk):
    cmds, cur = [], None
    for ln in blk.body:
        code = ln.split(" #")[0]
        first = code.split()[0] if code.split() else ""
        if os.path.basename(first) in TOOLS:
            words = code.split()
            sub = words[1] if os.path.basename(first) == "sluice-record" and len(words) > 1 else None
            cur = [os.path.basename(first), sub, code]
            cmds.append(cur)
        elif cur is not None:
            cur[2] += " " + code
    if not cmds:
        raise Failed("a usage block without a sluice-* tool")
    n = 0
    for tool, sub, text in cmds:
        helptext = tool_help(tool, sub)
        for opt in sorted(set(re.findall(r"--[a-z][a-z0-9-]*", text))):
            n += 1
            if not re.search(re.escape(opt) + r"(?![a-z0-9-])", helptext):
                raise Failed(f"{opt} is not an option of `{tool}{' ' + sub if sub else ''}` (not in its --help)")
    return f"{len(cmds)} synopses, {n} options, all in the tools' --help", ""


def check(t, blk, lib):
    clean_runs(t)
    if blk.kind == "skip":
        raise Skipped(blk.reason() or "no reason given")
    if blk.kind == "usage":
        return check_usage(t, blk)
    if blk.kind not in (None, "exact", "append", "syntax"):
        raise Failed(f"unknown marker 'readme-test: {blk.kind}'")
    if blk.lang in ("sh", "bash", "shell", "console"):
        return check_sh(t, blk)
    if blk.lang == "":
        first = next((x for x in blk.body if x.strip()), "")
        if first.startswith("$ "):
            return check_transcript(t, blk)
        return check_config(t, blk, lib)
    raise Failed(f"a '{blk.lang}' block: no way to run it; run it here or mark it "
                 "<!-- readme-test: skip (why) -->")


def main():
    for tool in TOOLS:
        if not os.access(os.path.join(BIN, tool), os.X_OK):
            skip_all(f"{BIN}/{tool} is not built")
    if not os.path.exists(os.path.join(FM, "train-labels-idx1-ubyte.gz")):
        skip_all(f"no Fashion-MNIST idx files in {FM}")
    if os.environ.get("SLUICE_SANITIZE"):
        skip_all("a sanitizer build (its libsluice.so cannot be loaded into Python); the plain build runs this")
    try:
        lib = ctypes.CDLL(os.path.join(BUILD, "lib", "libsluice.so"))
    except OSError as e:
        skip_all(f"cannot load libsluice.so: {e}")
    lib.sl_cfg_parse_file.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.sl_cfg_parse_file.restype = ctypes.c_int
    lib.sl_cfg_free.argtypes = [ctypes.c_void_p]
    lib.sl_errmsg.restype = ctypes.c_char_p

    blocks = [blk for page in pages() for blk in read_blocks(page)]
    only = set(sys.argv[1:])  # PAGE:LINE, to run a few blocks by hand
    t0 = time.monotonic()
    t = make_workdir()
    passed, failed, skipped = 0, [], []
    try:
        if not only:
            try:
                print(f"ok   pages: {check_named_examples(t, lib)}", flush=True)
            except Failed as e:
                failed.append("examples")
                print(f"FAIL pages: {e}", flush=True)
        for blk in blocks:
            where = f"{blk.page}:{blk.line}"
            if only and where not in only:
                continue
            b0 = time.monotonic()
            try:
                what, _ = check(t, blk, lib)
                passed += 1
                print(f"ok   {where}: {what} ({time.monotonic() - b0:.1f} s)", flush=True)
            except Skipped as e:
                skipped.append((where, str(e)))
                print(f"skip {where}: {e}", flush=True)
            except Failed as e:
                failed.append(where)
                print(f"FAIL {where}: {e}", flush=True)
    finally:
        shutil.rmtree(t, ignore_errors=True)
    print(f"{len(blocks) if not only else len(only)} blocks of {len(pages())} pages: {passed} ran, "
          f"{len(failed)} failed{' (' + ', '.join(map(str, failed)) + ')' if failed else ''}, "
          f"{len(skipped)} skipped ({time.monotonic() - t0:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
