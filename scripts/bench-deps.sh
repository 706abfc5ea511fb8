#!/usr/bin/env bash
# The Debian packages each benchmark's anchors need (the programs it measures Sluice against:
# tests/bench/*, ../shared/anchors/*) beyond what scripts/deps.sh installs for the build, the
# tests and the data; and their installation. tests/bench/run calls it before building a
# benchmark, so that a fresh machine measures the anchors instead of skipping them.
#
#   scripts/bench-deps.sh NAME          install what NAME's anchors lack (apt-get, only what
#                                       is missing: when nothing is, one dpkg-query and no
#                                       apt-get); exit 1 if a package is still missing after
#                                       that, one line per anchor on stderr:
#                                       "bench NAME: anchor X needs P: not installed (apt-get install -y P)"
#   scripts/bench-deps.sh --check NAME  install nothing: print the packages that would be
#                                       installed, one per line, sorted (nothing when none)
#   scripts/bench-deps.sh --list NAME   print each anchor and the packages it needs
#
# Exit status: 0 ok, 1 packages missing (install mode), 2 wrong usage or a NAME this table
# does not know (every tests/bench/bench_* has an entry, empty when its anchors need nothing).
# Without dpkg-query (not a Debian system) nothing can be checked: a warning, exit 0.
set -u
export LC_ALL=C # one sort order for sort and comm, and apt's messages untranslated

# bench_needs NAME: "anchor X|PACKAGE..." lines; 1 when NAME is not a benchmark listed here.
# On the CPU machines the anchors run under /usr/bin/python3, Debian's Python, so their
# modules are Debian packages (../shared/anchors/README.md).
bench_needs() {
    case $1 in
    bench_tfrecord)
        echo "anchor cat|coreutils"
        echo "anchor zcat|gzip" ;;
    bench_pipeline | bench_python)
        echo "anchor torch_loader.py|python3 python3-torch python3-torchvision python3-pil"
        echo "anchor make_jpeg_corpus.py (the JPEG corpus)|python3 python3-pil" ;;
    bench_train)
        echo "anchor torch_fashion.py|python3 python3-torch python3-numpy" ;;
    bench_allreduce)
        echo "anchor mpi_allreduce.c (mpicc, mpirun)|openmpi-bin libopenmpi-dev" ;;
    # anchors that are Sluice itself (bench_ps: the ring; bench_compress: no compression;
    # bench_autotune: fixed settings), the arithmetic bound (bench_train_gpu) or the JPEG
    # library of the build (bench_jpeg_cpu), the same pipeline replayed (bench_resume)
    bench_ps | bench_compress | bench_autotune | bench_train_gpu | bench_jpeg_cpu | bench_resume) ;;
    *) return 1 ;;
    esac
}

usage() {
    echo "usage: $0 [--check | --list] NAME   (e.g. $0 --check bench_pipeline)" >&2
    exit 2
}
mode=install
case ${1:-} in
--check | --list) mode=${1#--}; shift ;;
-h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
-*) usage ;;
esac
[ $# -eq 1 ] || usage
name=$1
if ! needs=$(bench_needs "$name"); then
    echo "bench-deps: unknown benchmark '$name' (add its anchors' packages to $0)" >&2
    exit 2
fi
if [ "$mode" = list ]; then
    [ -n "$needs" ] && printf '%s\n' "$needs" | sed 's/|/: /'
    exit 0
fi
[ -n "$needs" ] || exit 0
mapfile -t pkgs < <(printf '%s\n' "$needs" | cut -d'|' -f2 | tr ' ' '\n' | sort -u)

if ! command -v dpkg-query >/dev/null; then
    echo "bench-deps: no dpkg-query (not a Debian system): not checking what $name needs: ${pkgs[*]}" >&2
    exit 0
fi
# missing: the packages of pkgs dpkg does not hold installed, sorted (one dpkg-query)
missing() {
    dpkg-query -W -f='${Package}\t${Status}\n' "${pkgs[@]}" 2>/dev/null |
        awk -F'\t' '$2 == "install ok installed" { print $1 }' |
        sort -u | comm -23 <(printf '%s\n' "${pkgs[@]}") -
}
mapfile -t lack < <(missing)
if [ "$mode" = check ]; then
    [ ${#lack[@]} -eq 0 ] || printf '%s\n' "${lack[@]}"
    exit 0
fi
[ ${#lack[@]} -eq 0 ] && exit 0

echo "bench $name: installing ${lack[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo
    else echo "bench $name: not root and no sudo: cannot install ${lack[*]}" >&2; fi
fi
if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >&2 || echo "bench $name: apt-get update failed (no network?)" >&2
    $SUDO apt-get install -y -qq --no-install-recommends "${lack[@]}" >&2 ||
        echo "bench $name: apt-get install ${lack[*]} failed" >&2
fi
mapfile -t lack < <(missing)
[ ${#lack[@]} -eq 0 ] && exit 0
# one line per anchor that lacks something, with the packages it lacks
while IFS='|' read -r what want; do
    need=()
    for p in $want; do
        for l in "${lack[@]}"; do [ "$p" = "$l" ] && need+=("$p"); done
    done
    [ ${#need[@]} -eq 0 ] ||
        echo "bench $name: $what needs ${need[*]}: not installed (apt-get install -y ${need[*]})" >&2
done <<<"$needs"
exit 1
