#!/usr/bin/env python3
"""Man pages and bash completions for the sluice-* tools, from their own --help text.

    gen_man.py man TOOL_BINARY OUT.1 --version V --date YYYY-MM-DD
    gen_man.py completion TOOL_BINARY OUT

The build runs it after linking each tool (CMakeLists.txt, "install" region), so a page
can never describe options the binary does not have. No help2man: the tools' --help
follows one layout (tools/tool.h), which this parses:

    Usage: PROG ...            SYNOPSIS (and the "       PROG ..." lines after it)
    paragraphs                 DESCRIPTION (before the options) or NOTES (after them)
    "  -x, --opt ARG   text"   OPTIONS (lines indented 2 that start with '-'; more
                               indented lines continue the text)
    Commands: / "  cmd  text"  COMMANDS, each with its own `PROG CMD --help` (sluice-record)
    Exit status: ...           EXIT STATUS

NAME's one-line summary, EXAMPLES and SEE ALSO are written out below (the help text has no
examples). Output is deterministic: the date comes from the command line, not the clock.
"""
import argparse
import re
import subprocess
import sys

SUMMARY = {
    "sluice-train": "train a model on a Sluice input pipeline (single process, ring or parameter servers)",
    "sluice-stats": "run a Sluice pipeline alone and name its bottleneck op",
    "sluice-record": "inspect, verify, index, print and make TFRecord files",
    "sluice-launch": "start the local replicas and parameter-server tasks of a Sluice job",
}

EXAMPLES = {
    "sluice-train": [
        ("Train the Fashion-MNIST MLP of the examples for one epoch:",
         "sluice-train /usr/share/sluice/examples/fashion_mlp.sl --set train.epochs=1"),
        ("Continue an interrupted run from its newest sound checkpoint:",
         "sluice-train job.sl --resume"),
        ("Four replicas that average gradients over a ring:",
         "sluice-launch -n 4 -- sluice-train job.sl --set train.strategy=ring"),
    ],
    "sluice-stats": [
        ("Profile the `train' pipeline for 10 seconds and write a report page:",
         "sluice-stats job.sl --seconds 10 --html report.html"),
        ("Print the first two elements of a pipeline, as JSON:",
         "sluice-stats job.sl --pipeline eval --peek 2 --json"),
        ("Report on the stats file a training run wrote:",
         "sluice-stats --from runs/job/stats.json"),
    ],
    "sluice-record": [
        ("Check every record's CRCs, reading through damage:",
         "sluice-record verify --skip-corrupt data/train-*.tfrecord"),
        ("Print the first three records as protobuf JSON:",
         "sluice-record cat --json --limit 3 data/train-00000-of-00004.tfrecord"),
        ("Convert a folder of class folders of JPEGs, with a validation split:",
         "sluice-record convert images photos out --shards 4 --validation-fraction 0.1"),
    ],
    "sluice-launch": [
        ("Two workers and one parameter server of a training job:",
         "sluice-launch -n 2 --ps 1 -- sluice-train job.sl --set train.strategy=ps"),
        ("Restart a failed task up to three times, stop after an hour:",
         "sluice-launch -n 4 --restarts 3 --timeout 3600 -- sluice-train job.sl --resume"),
        ("Make CURVE key pairs for the cluster block:",
         "sluice-launch --keygen keys/server --keygen keys/client"),
    ],
}

TOOLS = sorted(SUMMARY)

# argument names whose values are paths (completion: file names / folder names)
FILE_ARGS = {"FILE", "CONFIG", "PATH", "PREFIX", "OUT", "FILE..."}
DIR_ARGS = {"DIR"}


def run_help(binary, *sub):
    p = subprocess.run([binary, *sub, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    if p.returncode != 0 or not p.stdout.strip():
        sys.exit(f"gen_man.py: '{binary} {' '.join(sub)} --help' exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout


# ---- parsing --help ---------------------------------------------------------------------

OPT_LINE = re.compile(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$")
CMD_LINE = re.compile(r"^  ([a-z][\w-]*(?: \S+)*?)\s{2,}(\S.*)$")


def paragraphs(text):
    out, cur = [], []
    for line in text.rstrip("\n").split("\n"):
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def parse_help(text):
    """-> dict(usage=[lines], desc=[paras], options=[(tag, text)], notes=[paras],
    commands=[(tag, text)], exit=[lines])."""
    h = {"usage": [], "desc": [], "options": [], "notes": [], "commands": [], "exit": []}
    seen_opts = False
    for para in paragraphs(text):
        if para[0].startswith("Usage:"):
            h["usage"] = [para[0][len("Usage:"):].strip()] + [l.strip() for l in para[1:]]
            continue
        if para[0] == "Commands:":
            for line in para[1:]:
                m = CMD_LINE.match(line)
                if m:
                    h["commands"].append([m.group(1), m.group(2)])
                elif h["commands"]:
                    h["commands"][-1][1] += " " + line.strip()
            continue
        rest = []
        i = 0
        while i < len(para):
            line = para[i]
            m = OPT_LINE.match(line)
            if m:
                seen_opts = True
                h["options"].append([m.group(1), m.group(2) or ""])
            elif h["options"] and seen_opts and line.startswith("    ") and not rest:
                h["options"][-1][1] = (h["options"][-1][1] + " " + line.strip()).strip()
            elif line.startswith("Exit status:"):
                h["exit"] = [l.strip() for l in para[i:]]
                break
            else:
                rest.append(line)
            i += 1
        if rest:
            (h["notes"] if seen_opts else h["desc"]).append(rest)
    return h


# ---- roff ---------------------------------------------------------------------------------

def esc(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return s


def line_out(s):
    """One input line: escaped, and a leading . or ' made literal."""
    s = esc(s)
    if s.startswith((".", "'")):
        s = "\\&" + s
    return s


def fmt_tag(tag):
    """'-n, --workers N' -> bold options, italic arguments."""
    parts = []
    for tok in re.split(r"(\s+|,)", tag):
        if not tok or tok.isspace() or tok == ",":
            parts.append(tok)
        elif tok.startswith("-"):
            name, eq, arg = tok.partition("=")
            parts.append("\\fB" + esc(name) + "\\fR" + (("=\\fI" + esc(arg) + "\\fR") if eq else ""))
        elif re.match(r"^[A-Z][A-Z0-9_.=]*$", tok):
            parts.append("\\fI" + esc(tok) + "\\fR")
        else:
            parts.append(esc(tok))
    return "".join(parts)


def para_out(lines):
    """A paragraph of help text: filled; a line indented in the help starts a new line
    (roff breaks before a line that begins with a space and keeps the indentation)."""
    return [".PP"] + [line_out(l) for l in lines]


def defs_out(defs):
    out = []
    for tag, text in defs:
        out += [".TP", fmt_tag(tag)] + ([line_out(text)] if text else [])
    return out


def body(h, sub=False):
    """DESCRIPTION/OPTIONS/NOTES/EXIT STATUS of one help text (for a sub-command: one .SS)."""
    out = []
    for p in h["desc"]:
        out += para_out(p)
    if h["options"]:
        out += ([".PP", "Options:"] if sub else [".SH OPTIONS"]) + defs_out(h["options"])
    for p in h["notes"]:
        out += para_out(p)
    if h["exit"]:
        out += ([".PP"] if sub else [".SH EXIT STATUS"]) + [line_out(l) for l in h["exit"]]
    return out


def synopsis_line(u):
    """'sluice-record cat [--json] FILE...': the program name bold, the rest as a tag."""
    words = u.split(" ", 1)
    return "\\fB" + esc(words[0]) + "\\fR" + ((" " + fmt_tag(words[1])) if len(words) > 1 else "")


def man_page(tool, binary, version, date):
    h = parse_help(run_help(binary))
    out = [
        f'.\\" Generated by scripts/gen_man.py from `{tool} --help` ({tool} {version}): do not edit.',
        f'.TH {esc(tool.upper())} 1 "{date}" "Sluice {esc(version)}" "User Commands"',
        ".SH NAME",
        f"{esc(tool)} \\- {esc(SUMMARY[tool])}",
        ".SH SYNOPSIS",
    ]
    for i, u in enumerate(h["usage"]):
        out += ([".br"] if i else []) + [synopsis_line(u)]
    out.append(".SH DESCRIPTION")
    desc = h["desc"] or [[SUMMARY[tool]]]
    for p in desc:
        out += para_out(p)
    if h["commands"]:
        out += [".SH COMMANDS"] + defs_out(h["commands"])
        seen = set()
        for tag, _ in h["commands"]:
            cmd = tag.split()[0]
            if cmd in seen:
                continue
            seen.add(cmd)
            sh = parse_help(run_help(binary, cmd))
            out.append(f".SS {esc(cmd)}")
            for i, u in enumerate(sh["usage"]):
                out += ([".br"] if i else [".PP"]) + [synopsis_line(u)]
            out += body(sh, sub=True)
    # every tool takes -h/--help and --version (tools/tool.h), listed or not
    names = " ".join(t for t, _ in h["options"])
    opts = list(h["options"])
    if not re.search(r"(^|[ ,])--help\b", names):
        opts.append(["-h, --help", "print this help (the text this page is made from) and exit"])
    if not re.search(r"(^|[ ,])--version\b", names):
        opts.append(["--version", "print the version (and the git commit of the build) and exit"])
    out += body(dict(h, desc=[], options=opts))
    out.append(".SH EXAMPLES")
    for text, cmd in EXAMPLES[tool]:
        out += [".PP", line_out(text), ".PP", ".RS 4", ".EX", line_out(cmd), ".EE", ".RE"]
    out.append(".SH SEE ALSO")
    others = [t for t in TOOLS if t != tool]
    out.append(",\n".join(f"\\fB{esc(t)}\\fR(1)" for t in others))
    out += [".PP", f"The guide: docs/tools/{esc(tool)}.md of the Sluice sources (README.md links every page); example configs in",
            "\\fI/usr/share/sluice/examples\\fR."]
    return "\n".join(out) + "\n"


# ---- bash completion ----------------------------------------------------------------------

CHOICES = re.compile(r"^(?:(?:Stream )?)([a-z0-9]+(?:, [a-z0-9]+)* or [a-z0-9]+)\b")


def opt_specs(options):
    """-> [(names, kind)] with kind '' (flag), 'file', 'dir', 'any', or 'choice:a b c'."""
    specs = []
    for tag, text in options:
        # "--hold-after E --hold-until FILE": two options on one line
        toks = re.split(r"\s+", tag.replace(",", " "))
        pairs, j = [], 0
        while j < len(toks):
            if toks[j].startswith("-"):
                a = toks[j + 1] if j + 1 < len(toks) and not toks[j + 1].startswith("-") else None
                pairs.append((toks[j], a))
                j += 2 if a else 1
            else:
                j += 1
        for n, a in pairs:
            if a is None:
                kind = ""
            elif a in DIR_ARGS:
                kind = "dir"
            elif a in FILE_ARGS:
                kind = "file"
            else:
                m = CHOICES.match(text)
                kind = "choice:" + m.group(1).replace(",", "").replace(" or ", " ") if m else "any"
            specs.append((n, kind))
    return specs


def case_block(specs, indent):
    """The `case $prev in` arms for options that take a value."""
    arms = {}
    for n, kind in specs:
        if kind:
            arms.setdefault(kind, []).append(n)
    out = []
    for kind, names in sorted(arms.items()):
        pat = "|".join(names)
        if kind == "file":
            act = "COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null"
        elif kind == "dir":
            act = "COMPREPLY=($(compgen -d -- \"$cur\")); compopt -o filenames 2>/dev/null"
        elif kind.startswith("choice:"):
            act = f"COMPREPLY=($(compgen -W '{kind[7:]}' -- \"$cur\"))"
        else:
            act = "COMPREPLY=()"
        out.append(f"{indent}{pat}) {act}; return ;;")
    return out


def completion(tool, binary):
    h = parse_help(run_help(binary))
    fn = "_" + tool.replace("-", "_")
    lines = [
        f"# bash completion for {tool}: generated by scripts/gen_man.py from `{tool} --help`.",
        "# Options, their values (files, folders, fixed choices), sub-commands; file names elsewhere.",
        f"{fn}() {{",
        "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} i",
        "    COMPREPLY=()",
    ]
    if tool == "sluice-launch":
        # after "--": the program to run, then its own arguments (file names)
        lines += [
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            "        if [ \"${COMP_WORDS[i]}\" = -- ]; then",
            "            if [ $((i + 1)) -eq \"$COMP_CWORD\" ]; then COMPREPLY=($(compgen -c -- \"$cur\"));",
            "            else COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null; fi",
            "            return",
            "        fi",
            "    done",
        ]
    if h["commands"]:
        cmds = []
        for tag, _ in h["commands"]:
            c = tag.split()[0]
            if c not in cmds:
                cmds.append(c)
        lines += [
            "    local cmd=\"\"",
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            "        case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac",
            "    done",
            "    case $cmd in",
            f"    \"\") COMPREPLY=($(compgen -W '{' '.join(cmds)} --help --version' -- \"$cur\")); return ;;",
        ]
        for c in cmds:
            sh = parse_help(run_help(binary, c))
            specs = opt_specs(sh["options"])
            names = " ".join(n for n, _ in specs) + " --help"
            subs = [t.split()[1] for t, _ in h["commands"] if t.split()[0] == c and len(t.split()) > 1
                    and re.match(r"^[a-z][\w-]*$", t.split()[1])]
            lines.append(f"    {c})")
            lines.append("        case $prev in")
            lines += case_block(specs, "        ")
            lines.append("        esac")
            if subs:
                lines.append(f"        if [ \"${{COMP_WORDS[COMP_CWORD-1]}}\" = {c} ]; then"
                             f" COMPREPLY=($(compgen -W '{' '.join(subs)}' -- \"$cur\")); return; fi")
            lines.append(f"        case $cur in -*) COMPREPLY=($(compgen -W '{names}' -- \"$cur\")); return ;; esac")
            lines.append("        COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null; return ;;")
        lines.append("    esac")
    else:
        specs = opt_specs(h["options"]) + [("--help", ""), ("--version", "")]
        names = " ".join(dict.fromkeys(n for n, _ in specs))
        lines.append("    case $prev in")
        lines += case_block(specs, "    ")
        lines.append("    esac")
        lines.append(f"    case $cur in -*) COMPREPLY=($(compgen -W '{names}' -- \"$cur\")); return ;; esac")
        if tool in ("sluice-train", "sluice-stats"):
            # CONFIG: *.sl files and folders
            lines.append("    COMPREPLY=($(compgen -f -X '!*.sl' -- \"$cur\") $(compgen -d -- \"$cur\"))")
        else:
            lines.append("    COMPREPLY=($(compgen -f -- \"$cur\"))")
        lines.append("    compopt -o filenames 2>/dev/null")
    lines += ["}", f"complete -F {fn} {tool}", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["man", "completion"])
    ap.add_argument("binary")
    ap.add_argument("out")
    ap.add_argument("--version", default="")
    ap.add_argument("--date", default="")
    a = ap.parse_args()
    tool = a.binary.rsplit("/", 1)[-1]
    if tool not in SUMMARY:
        sys.exit(f"gen_man.py: unknown tool '{tool}' (one of {', '.join(TOOLS)})")
    text = man_page(tool, a.binary, a.version, a.date) if a.what == "man" else completion(tool, a.binary)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
