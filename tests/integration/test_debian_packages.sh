#!/usr/bin/env bash
# The Debian packages, end to end, from the tree ctest runs in (nothing is compiled again):
# `cpack -G DEB` makes libsluice<SOVERSION>, libsluice-dev, sluice-tools and (with the Python
# module) python3-sluice; lintian on them reports no error and no warning (lintian
# overrides shipped in the packages aside; SLUICE_LINTIAN_ALLOW_WARNINGS=1 lets warnings
# pass, listed); `dpkg -i` of all of them gives working tools (/usr/bin/sluice-train --help
# and --version), man pages (`man -w`, and `man --warnings` renders each without a warning,
# with NAME, SYNOPSIS, DESCRIPTION, OPTIONS, EXAMPLES, SEE ALSO), bash completions
# (options, choices, sub-commands), the library in ldconfig's cache (the trigger), a C
# program built with `pkg-config --cflags --libs sluice` and one with find_package(sluice)
# (static and shared targets), both without any path given, and `import sluice` in
# /usr/bin/python3; `dpkg --purge` then leaves none of the files the packages installed
# (every path of `dpkg -L` that was not there before is gone again).
# Skipped (77) unless root with dpkg, dpkg-deb, dpkg-shlibdeps, lintian and cpack; in
# sanitizer and fuzz builds; and when Sluice is already installed on this system (a
# package of these names, or one of the packages' files present): the test never touches
# an installation it did not make. Runs take a lock (/tmp/sluice-debian-packages.lock), so
# two builds' test runs do not install at the same time. About 40 s on 2 cores, most of it
# lintian and the find_package build.
set -uo pipefail
# (with pipefail, "CMD | grep -q" fails when grep leaves early and CMD gets SIGPIPE: the
# pipes below end in "grep ... >/dev/null", which reads all)
. "$(dirname "$0")/lib.sh"

SRC=${SLUICE_SRC:?set SLUICE_SRC to the source tree}
BUILD=${SLUICE_BUILD:-$(cd "$BIN/.." && pwd)}
if [ -n "${SLUICE_SANITIZE:-}" ] || grep -q '^SLUICE_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
    echo "skipped: a sanitizer or fuzz build (its library needs the sanitizer runtime)"
    exit 77
fi
if [ "$(id -u)" != 0 ]; then echo "skipped: dpkg -i needs root"; exit 77; fi
for p in dpkg dpkg-deb dpkg-shlibdeps lintian cpack cmake pkg-config man; do
    command -v "$p" >/dev/null || { echo "skipped: $p is not installed (apt-get install lintian dpkg-dev)"; exit 77; }
done
[ -f "$BUILD/CPackConfig.cmake" ] || { echo "FAIL: $BUILD has no CPackConfig.cmake"; exit 1; }
VERSION=$(sed -n 's/^project(sluice VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
TOOLS="sluice-train sluice-record sluice-stats sluice-launch"
sl_require_tools $TOOLS
CC=${CC:-cc}

exec 9>/tmp/sluice-debian-packages.lock
flock -w 600 9 || { echo "FAIL: another run holds /tmp/sluice-debian-packages.lock"; exit 1; }
if dpkg-query -W -f='${Package} ${Status}\n' 'libsluice*' sluice-tools python3-sluice 2>/dev/null | grep ' installed$' >/dev/null; then
    echo "skipped: Sluice packages are installed here already:"
    dpkg-query -W -f='${Package} ${Status}\n' 'libsluice*' sluice-tools python3-sluice 2>/dev/null | grep ' installed$'
    exit 77
fi

T=$(mktemp -d /tmp/sluice-debpkg-XXXXXX)
PKGS=()
cleanup() {
    # never leave the packages installed, whatever failed
    if [ ${#PKGS[@]} -gt 0 ] && dpkg-query -W -f='${Status}\n' "${PKGS[@]}" 2>/dev/null | grep ' installed$' >/dev/null; then
        dpkg --purge "${PKGS[@]}" >/dev/null 2>&1
    fi
    rm -rf "$T"
}
trap cleanup EXIT

# ---- make the packages from this build ----
# the generated files the packages take (man pages, completions, symbols, changelog) are
# made by the default build (target sluice_package_files); nothing is built here
for f in doc/man1/sluice-train.1.gz doc/completions/sluice-record debian/symbols debian/changelog.Debian.gz; do
    [ -f "$BUILD/$f" ] || { echo "FAIL: $BUILD/$f is missing: cmake --build $BUILD (--target sluice_package_files)"; exit 1; }
done
# CPACK_CMAKE_GENERATOR=Ninja: no "preinstall" make of the whole tree first (test_install.sh)
run cpack 0 cpack -G DEB -B "$T/deb" --config "$BUILD/CPackConfig.cmake" -D CPACK_CMAKE_GENERATOR=Ninja || exit 1
soversion=$(readelf -d "$BUILD"/lib/libsluice.so | sed -n 's/.*SONAME.*libsluice\.so\.\([0-9.]*\)\]/\1/p')
LIBPKG=libsluice$soversion
want="$LIBPKG libsluice-dev sluice-tools"
[ -n "$(find "$BUILD/python/sluice" -name '_sluice*.so' 2>/dev/null)" ] && want="$want python3-sluice"
DEBS=()
for p in $want; do
    f=$(ls "$T/deb/${p}_${VERSION}"-*_*.deb 2>/dev/null | head -n 1)
    if [ -z "$f" ]; then fail "cpack made no ${p}_${VERSION}-*.deb: $(ls "$T/deb")"; else DEBS+=("$f"); PKGS+=("$p"); fi
done
[ "$fails" = 0 ] && ok "cpack -G DEB: $(cd "$T/deb" && ls *.deb | tr '\n' ' ')(${SECONDS}s)" || exit 1

# ---- lintian ----
lintian --no-cfg --tag-display-limit 0 "${DEBS[@]}" >"$T/lintian.out" 2>"$T/lintian.err"
errors=$(grep -c '^E: ' "$T/lintian.out")
warnings=$(grep -c '^W: ' "$T/lintian.out")
if [ "$errors" != 0 ] || { [ "$warnings" != 0 ] && [ -z "${SLUICE_LINTIAN_ALLOW_WARNINGS:-}" ]; }; then
    fail "lintian: $errors error(s), $warnings warning(s):"
    grep '^[EW]: ' "$T/lintian.out" | sed 's/^/    /'
else
    ok "lintian: 0 errors, $warnings warnings $(grep '^W: ' "$T/lintian.out" | tr '\n' ';')(at ${SECONDS}s)"
fi
# the library package: SONAME, shlibs, symbols, the ldconfig trigger; nothing but the library
dpkg-deb --ctrl-tarfile "${DEBS[0]}" | tar -t >"$T/lib-control.out"
for c in shlibs symbols triggers; do
    grep -q "^\./$c$" "$T/lib-control.out" || fail "$LIBPKG has no $c control file"
done
dpkg-deb -I "${DEBS[0]}" triggers | grep -x 'activate-noawait ldconfig' >/dev/null || fail "$LIBPKG: triggers is not 'activate-noawait ldconfig'"
dpkg-deb -I "${DEBS[0]}" postinst >/dev/null 2>&1 && fail "$LIBPKG has a postinst (ldconfig is the trigger's)"
dpkg-deb -I "${DEBS[0]}" shlibs | grep -x "libsluice $soversion $LIBPKG (>= $VERSION)" >/dev/null ||
    fail "$LIBPKG shlibs: $(dpkg-deb -I "${DEBS[0]}" shlibs)"
[ "$fails" = 0 ] && ok "$LIBPKG: shlibs 'libsluice $soversion $LIBPKG (>= $VERSION)', symbols, activate-noawait ldconfig, no maintainer scripts"

# ---- install ----
# what was already there: the paths the packages hold that exist before the install
for d in "${DEBS[@]}"; do dpkg-deb --fsys-tarfile "$d" | tar -t; done | sed 's|^\./|/|; s|/$||' | grep -v '^$' | sort -u >"$T/paths"
: >"$T/before"
while read -r p; do
    if [ -e "$p" ] || [ -L "$p" ]; then
        echo "$p" >>"$T/before"
        [ -d "$p" ] && [ ! -L "$p" ] && continue
        echo "skipped: $p exists already (another Sluice installation?)"
        exit 77
    fi
done <"$T/paths"
run dpkg-install 0 dpkg -i "${DEBS[@]}" || exit 1
for p in "${PKGS[@]}"; do dpkg -L "$p"; done | grep -vx '/\.' | sort -u >"$T/dpkg-L"
ok "dpkg -i: ${PKGS[*]} ($(wc -l <"$T/dpkg-L") paths; at ${SECONDS}s)"

# tools, man pages, completions
for t in $TOOLS; do
    run "help-$t" 0 env -u LD_LIBRARY_PATH "/usr/bin/$t" --help || continue
    run "version-$t" 0 "/usr/bin/$t" --version && grep -q "^$t (Sluice) $VERSION" "$T/version-$t.out" ||
        fail "/usr/bin/$t --version: $(cat "$T/version-$t.out")"
    page=$(man -w "$t" 2>/dev/null)
    [ "$page" = "/usr/share/man/man1/$t.1.gz" ] || { fail "man -w $t: '$page'"; continue; }
    MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -l "$page" >"$T/man-$t.out" 2>"$T/man-$t.err"
    [ -s "$T/man-$t.err" ] && fail "man --warnings $t: $(head -3 "$T/man-$t.err")"
    for s in NAME SYNOPSIS DESCRIPTION OPTIONS EXAMPLES "SEE ALSO"; do
        grep -qx "$s" "$T/man-$t.out" || fail "man $t has no $s section"
    done
    [ -f "/usr/share/bash-completion/completions/$t" ] || fail "no bash completion for $t"
done
grep -q -- '--hold-until' "$T/man-sluice-train.out" && grep -q '^   convert$' "$T/man-sluice-record.out" &&
    ok "the tools run from /usr/bin; man -w finds their pages; each renders without warnings, all sections" ||
    fail "man pages: sluice-train lacks --hold-until, or sluice-record the convert command"
# complete WORDS...: what the tool's completion function offers for the last word
complete_words() {
    local tool=$1
    shift
    bash -c '. "/usr/share/bash-completion/completions/$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
             compopt() { :; }; "_${COMP_WORDS[0]//-/_}"; printf "%s\n" "${COMPREPLY[@]}"' _ "$tool" "$tool" "$@" | sort | tr '\n' ' '
}
c1=$(complete_words sluice-train --back)
c2=$(complete_words sluice-train --backend "")
c3=$(complete_words sluice-record "")
c4=$(complete_words sluice-record cat --compression g)
c5=$(complete_words sluice-launch -n 2 --ps)
[ "$c1" = "--backend " ] && [ "$c2" = "auto cpu cuda " ] && [ "$c3" = "--help --version cat convert index inspect verify " ] &&
    [ "$c4" = "gzip " ] && [ "$c5" = "--ps " ] && ok "bash completion: options, --backend's choices, sluice-record's commands" ||
    fail "bash completion: '$c1' / '$c2' / '$c3' / '$c4' / '$c5'"
# (into a file: with pipefail, grep -q leaving early would fail ldconfig with SIGPIPE)
ldconfig -p >"$T/ldconfig.out"
grep -q "libsluice\.so\.$soversion .*=> .*/lib/.*libsluice\.so\.$soversion$" "$T/ldconfig.out" && ok "ldconfig's cache has libsluice.so.$soversion (trigger)" ||
    fail "libsluice.so.$soversion is not in ldconfig's cache"

# programs built against the installed packages, nothing but the system's default paths
mkdir -p "$T/app"
cat >"$T/app/hello.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <sluice/config.h>
#include <sluice/version.h>

int main(void) {
    const char *text = "train {\n epochs 15\n checkpoint every=1 keep=3\n}\n";
    sl_cfg *c;
    if (sl_cfg_parse(text, strlen(text), "hello.sl", &c) != SL_OK) return 1;
    if (sl_cfg_set(c, "train.checkpoint=(steps=20)") != SL_OK) return 2;
    int n;
    const sl_cfg_stmt *r = sl_cfg_root(c, &n);
    printf("sluice %s steps=%lld\n", sl_version(), (long long)sl_cfg_opt(&r[0].body[1], "steps")->inum);
    sl_cfg_free(c);
    return 0;
}
EOF
want_out="sluice $VERSION steps=20"
check_hello() { # NAME PROGRAM
    if run "$1" 0 env -u LD_LIBRARY_PATH "$2" && [ "$(cat "$T/$1.out")" = "$want_out" ]; then ok "$1: '$want_out'"; else
        fail "$1: printed '$(cat "$T/$1.out" 2>/dev/null)'"; fi
}
# shellcheck disable=SC2046
if run pc-build 0 env -u PKG_CONFIG_PATH $CC -o "$T/app/hello_pc" "$T/app/hello.c" $(env -u PKG_CONFIG_PATH pkg-config --cflags --libs sluice); then
    check_hello "pkg-config (installed)" "$T/app/hello_pc"
    readelf -d "$T/app/hello_pc" | grep "NEEDED.*libsluice\.so\.$soversion" >/dev/null || fail "hello_pc is not linked to libsluice.so.$soversion"
fi
cat >"$T/app/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.21)
project(hello LANGUAGES C)
find_package(sluice 0.1 REQUIRED)
add_executable(hello_static hello.c)
target_link_libraries(hello_static PRIVATE sluice::sluice)
add_executable(hello_shared hello.c)
target_link_libraries(hello_shared PRIVATE sluice::sluice_shared)
EOF
if run fp-configure 0 env -u CMAKE_PREFIX_PATH cmake -S "$T/app" -B "$T/app/build" &&
    run fp-build 0 cmake --build "$T/app/build"; then
    grep -q 'sluice_DIR:PATH=/usr/lib/.*/cmake/sluice' "$T/app/build/CMakeCache.txt" ||
        fail "find_package found $(grep sluice_DIR "$T/app/build/CMakeCache.txt")"
    check_hello "find_package sluice::sluice (installed)" "$T/app/build/hello_static"
    check_hello "find_package sluice::sluice_shared (installed)" "$T/app/build/hello_shared"
fi
if [[ " ${PKGS[*]} " == *" python3-sluice "* ]]; then
    if (cd "$T" && run py-import 0 env -u PYTHONPATH /usr/bin/python3 -c 'import sluice, sys; print(sluice.__file__)') &&
        grep -q '^/usr/lib/python3/dist-packages/sluice/__init__.py$' "$T/py-import.out"; then
        ok "/usr/bin/python3 -c 'import sluice': $(cat "$T/py-import.out")"
    else
        fail "import sluice: $(cat "$T/py-import.out" "$T/py-import.err" 2>/dev/null | tail -3)"
    fi
fi

# ---- remove, purge: nothing of it left ----
run dpkg-remove 0 dpkg -r "${PKGS[@]}" && run dpkg-purge 0 dpkg --purge "${PKGS[@]}"
left=$(while read -r p; do
    if { [ -e "$p" ] || [ -L "$p" ]; } && ! grep -qxF "$p" "$T/before"; then echo "$p"; fi
done <"$T/dpkg-L")
[ -z "$left" ] && ok "dpkg -r, --purge: none of the $(wc -l <"$T/dpkg-L") installed paths is left" ||
    fail "left behind after dpkg --purge: $(echo "$left" | head -10 | tr '\n' ' ')"
dpkg-query -W -f='${Package} ${Status}\n' "${PKGS[@]}" 2>/dev/null | grep ' installed$' >/dev/null && fail "still installed"
ldconfig -p >"$T/ldconfig2.out"
grep -q "libsluice\.so" "$T/ldconfig2.out" && fail "libsluice is still in ldconfig's cache"
man -w sluice-train >/dev/null 2>&1 && fail "man -w sluice-train still finds a page"

[ "$fails" = 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all Debian package checks passed (${SECONDS}s)"
