# tests/gpu/emu: turn CUDA kernel launches in a .cu file into emu_launch calls so the file
# compiles as plain C++ against the emulated runtime in include/.
# Rewrite kernel launches NAME<<<G, B, SH, ST>>>(ARGS); into
#   emu_launch("NAME", THREADED, dim3(G), dim3(B), ST, NAME, ARGS)
# which evaluates ARGS now (as a real launch does) and queues the kernel on stream ST.
#   convert.py FILE.cu                    the result on stdout
#   convert.py FILE.cu OUT.cc NAME        the result in OUT.cc, after a `#line 1 "NAME"`
#                                         (compiler messages then name NAME's lines)
import re, sys
src = open(sys.argv[1]).read()
THREADED = {"k_col_partial", "k_xent_check", "k_xent_rows", "k_ssq_partial"}
out, i = [], 0
while True:
    j = src.find("<<<", i)
    if j < 0:
        out.append(src[i:]); break
    m = re.search(r"([A-Za-z_]\w*(?:<\w+>)?)$", src[i:j])
    name = m.group(1)
    start = j - len(name)
    k = src.find(">>>", j)
    cfg = src[j + 3:k]
    # split config at top-level commas
    parts, depth, cur = [], 0, ""
    for ch in cfg:
        if ch == "(": depth += 1
        if ch == ")": depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur); cur = ""
        else:
            cur += ch
    parts.append(cur)
    stream = parts[3].strip() if len(parts) > 3 else "0"
    assert src[k + 3] == "("
    depth, p = 0, k + 3
    while True:
        if src[p] == "(": depth += 1
        elif src[p] == ")":
            depth -= 1
            if depth == 0: break
        p += 1
    args = src[k + 4:p].strip()
    base = name.split("<")[0]
    out.append(src[i:start])
    out.append('emu_launch("%s", %s, dim3(%s), dim3(%s), (cudaStream_t)(%s), %s%s)' % (
        base, "true" if base in THREADED else "false", parts[0].strip(), parts[1].strip(), stream, name,
        ", " + args if args else ""))
    i = p + 1
if len(sys.argv) > 3:
    with open(sys.argv[2], "w") as f:
        f.write('#line 1 "%s"\n' % sys.argv[3] + "".join(out))
else:
    print("".join(out), end="")
