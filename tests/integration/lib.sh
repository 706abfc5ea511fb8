# Shared by the integration tests (source it; it is not a test itself): skip checks, a
# work folder removed on exit, pass/fail accounting, and a small Fashion-MNIST conversion.
#   . "$(dirname "$0")/lib.sh"
#   sl_require_tools sluice-train sluice-record   # exit 77 (skipped) when one is not built
#   sl_require_fashion                             # ... or when Debian's idx files are missing
#   sl_workdir train                               # T=/tmp/sluice-train-XXXXXX, removed on exit
#   sl_convert_fashion 2 1000                      # $T/data: 2 shards of the first 1000 records
#   run NAME WANT_RC CMD... && ok "..."            # output kept in $T/NAME.{out,err}
#   sl_finish                                      # exit 1 if anything failed
BIN=${SLUICE_BIN:-build/bin}
FM=/usr/share/datasets/fashion-mnist
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

sl_require_tools() {
    local tool
    for tool in "$@"; do
        if [ ! -x "$BIN/$tool" ]; then echo "skipped: $BIN/$tool is not built"; exit 77; fi
    done
}

sl_require_fashion() {
    if [ ! -f "$FM/train-labels-idx1-ubyte.gz" ]; then echo "skipped: no Fashion-MNIST idx files in $FM"; exit 77; fi
}

sl_workdir() {
    T=$(mktemp -d "/tmp/sluice-$1-XXXXXX")
    trap 'rm -rf "$T"' EXIT
}

# SHARDS LIMIT: the first LIMIT records of each split into $T/data
sl_convert_fashion() {
    "$BIN/sluice-record" convert fashion-mnist "$T/data" --shards "$1" --limit "$2" >/dev/null 2>"$T/convert.err" ||
        { cat "$T/convert.err"; echo "FAIL: convert"; exit 1; }
}

# run NAME WANT_RC CMD...: run, keep stdout/stderr in $T/NAME.{out,err}, check the exit status
run() {
    local name=$1 want=$2
    shift 2
    "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$name: exit $rc, expected $want"
        sed 's/^/    /' "$T/$name.err" "$T/$name.out" | tail -20
        return 1
    fi
    return 0
}
