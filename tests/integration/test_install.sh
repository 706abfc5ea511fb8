#!/usr/bin/env bash
# Installing Sluice and building against it, from the tree ctest runs in (nothing of it is
# rebuilt): every tool's --version; `cmake --install BUILD --prefix $T/prefix` (libraries,
# headers, tools, sluice.pc, sluiceConfig.cmake); a small C program built against that
# prefix with pkg-config, and with find_package(sluice) (static and shared targets); the
# .debs from `cpack -G DEB` (their control fields and files, and a program built against the
# extracted packages; as root with lintian left to test_debian_packages.sh, unless
# SLUICE_TEST_DEB=1); and a parent project that takes Sluice by add_subdirectory: it
# configures (tests off), generates, preprocesses every library source with the
# subproject's own flags (its include paths and generated headers must resolve), archives
# the library, and builds and runs a program against it. The library's objects are this
# build's own, of the same sources (a compiler launcher takes them after the preprocessing):
# compiling the library once more, unoptimised, took about a minute of 2 cores and checks
# nothing this build's compile does not. SLUICE_TEST_FULL=1 compiles them there too;
# The parent project is configured a second time: the same flags, nothing compiled again.
# SLUICE_TEST_NO_SUBDIR=1 leaves the add_subdirectory part out.
# Skipped (77) in sanitizer and fuzz builds, whose libraries need the sanitizer runtime.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

SRC=${SLUICE_SRC:?set SLUICE_SRC to the source tree}
BUILD=${SLUICE_BUILD:-$(cd "$BIN/.." && pwd)}
if [ -n "${SLUICE_SANITIZE:-}" ] || grep -q '^SLUICE_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
    echo "skipped: a sanitizer or fuzz build (its library needs the sanitizer runtime)"
    exit 77
fi
TOOLS="sluice-train sluice-record sluice-stats sluice-launch"
sl_require_tools $TOOLS
[ -f "$BUILD/cmake_install.cmake" ] || { echo "FAIL: $BUILD is not a configured build"; exit 1; }
VERSION=$(sed -n 's/^project(sluice VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
[ -n "$VERSION" ] || { echo "FAIL: no project(sluice VERSION ...) in $SRC/CMakeLists.txt"; exit 1; }
sl_workdir install
CC=${CC:-cc}

# ---- every tool answers --version, exit 0 ----
for t in $TOOLS; do
    if run "version-$t" 0 "$BIN/$t" --version; then
        if grep -Eqx "$t \\(Sluice\\) $VERSION( \\(git [0-9a-f]+(-dirty)?\\))?" "$T/version-$t.out" &&
            [ "$(wc -l <"$T/version-$t.out")" = 1 ] && [ ! -s "$T/version-$t.err" ]; then
            ok "$t --version: $(cat "$T/version-$t.out")"
        else
            fail "$t --version printed: $(cat "$T/version-$t.out" "$T/version-$t.err")"
        fi
    fi
done
# anywhere before "--" (like --help), and a failed write of it is an error
run version-late 0 "$BIN/sluice-stats" x.sl --peek 1 --version && grep -q "^sluice-stats (Sluice) $VERSION" "$T/version-late.out" &&
    ok "--version after other arguments" || fail "--version after other arguments: $(cat "$T/version-late.out")"
# after "--" it belongs to the program sluice-launch runs
run version-launch 0 "$BIN/sluice-launch" -n 1 --port-base 23970 -- /bin/sh -c 'echo "arg $1"' sh --version &&
    grep -qx '\[worker 0\] arg --version' "$T/version-launch.out" && ! grep -q '(Sluice)' "$T/version-launch.out" &&
    ok "sluice-launch -- PROGRAM --version: passed to PROGRAM" || fail "launch --: $(cat "$T/version-launch.out")"
if [ -w /dev/full ]; then
    run version-full 1 sh -c "'$BIN/sluice-train' --version >/dev/full" &&
        grep -q "sluice-train: writing to standard output failed: No space left on device" "$T/version-full.err" &&
        ok "--version >/dev/full: exit 1 with the reason" || fail "--version >/dev/full: $(cat "$T/version-full.err")"
fi

# ---- cmake --install into a temporary prefix ----
P=$T/prefix
if ! run install 0 cmake --install "$BUILD" --prefix "$P"; then exit 1; fi
pc=$(find "$P" -name sluice.pc)
cfg=$(find "$P" -name sluiceConfig.cmake)
libdir=$(dirname "$(find "$P" -name libsluice.a)")
missing=""
for f in "$libdir/libsluice.a" "$libdir/libsluice.so" "$P/include/sluice/version.h" "$P/include/sluice/pipeline.h" \
    "$(dirname "$cfg")/sluiceConfigVersion.cmake" "$pc" "$cfg"; do
    [ -f "$f" ] || missing="$missing $f"
done
for t in $TOOLS; do [ -x "$P/bin/$t" ] || missing="$missing $P/bin/$t"; done
[ -z "$missing" ] && ok "installed: libraries, headers, tools, sluice.pc, sluiceConfig.cmake (under $libdir)" ||
    fail "not installed:$missing"
grep -q '^Requires.private: zlib libprotobuf-c libturbojpeg libjpeg libzmq openblas$' "$pc" &&
    grep -q "^Version: $VERSION$" "$pc" && ok "sluice.pc: Version $VERSION, Requires.private" ||
    fail "sluice.pc: $(cat "$pc")"
run installed-tool 0 "$P/bin/sluice-train" --version && ok "the installed sluice-train runs" ||
    fail "the installed sluice-train"

# the program every way below builds: the version and one config value, through public headers
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
want="sluice $VERSION steps=20"
check_hello() { # NAME PROGRAM [env...]
    local name=$1 prog=$2
    shift 2
    if run "$name" 0 env "$@" "$prog" && [ "$(cat "$T/$name.out")" = "$want" ]; then
        ok "$name: '$want'"
    else
        fail "$name: printed '$(cat "$T/$name.out" 2>/dev/null)'"
    fi
}

# ---- pkg-config ----
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
run pc-version 0 pkg-config --modversion sluice && [ "$(cat "$T/pc-version.out")" = "$VERSION" ] &&
    ok "pkg-config --modversion sluice: $VERSION" || fail "pkg-config --modversion sluice"
# shellcheck disable=SC2046
if run pc-build 0 $CC -o "$T/app/hello_pc" "$T/app/hello.c" $(pkg-config --cflags --libs sluice); then
    check_hello pkg-config "$T/app/hello_pc" LD_LIBRARY_PATH="$libdir"
    readelf -d "$T/app/hello_pc" | grep -q 'NEEDED.*libsluice\.so\.0\.1' &&
        ok "pkg-config links the shared library (soname libsluice.so.0.1)" || fail "hello_pc is not linked to libsluice.so.0.1"
fi

# ---- find_package(sluice) ----
cat >"$T/app/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.21)
project(hello LANGUAGES C)
find_package(sluice 0.1 REQUIRED)
add_executable(hello_static hello.c)
target_link_libraries(hello_static PRIVATE sluice::sluice)
add_executable(hello_shared hello.c)
target_link_libraries(hello_shared PRIVATE sluice::sluice_shared)
EOF
if run fp-configure 0 cmake -S "$T/app" -B "$T/app/build" -DCMAKE_PREFIX_PATH="$P" &&
    run fp-build 0 cmake --build "$T/app/build"; then
    check_hello "find_package static" "$T/app/build/hello_static"
    check_hello "find_package shared" "$T/app/build/hello_shared"
    readelf -d "$T/app/build/hello_static" | grep -q 'NEEDED.*libsluice' &&
        fail "hello_static needs libsluice.so" || ok "sluice::sluice is the static library"
fi
sed -i 's/find_package(sluice 0.1 REQUIRED)/find_package(sluice 7.0 REQUIRED)/' "$T/app/CMakeLists.txt"
run fp-version 1 cmake -S "$T/app" -B "$T/app/build7" -DCMAKE_PREFIX_PATH="$P" &&
    grep -q "version: $VERSION" "$T/fp-version.err" && ok "find_package(sluice 7.0) refused (installed $VERSION)" ||
    fail "find_package(sluice 7.0): $(tail -5 "$T/fp-version.err")"

# ---- the .deb packages ----
# cpack -G DEB makes libsluice<SOVERSION>, libsluice-dev, sluice-tools (and python3-sluice):
# their names, versions, Depends and files; the library and -dev packages unpacked anywhere
# build a program (sluice.pc is relocatable). As root with lintian, test_debian_packages.sh
# makes the same packages, checks them with lintian and installs them: left to it here.
if [ -z "${SLUICE_TEST_DEB:-}" ] && [ "$(id -u)" = 0 ] && command -v lintian >/dev/null && command -v dpkg >/dev/null; then
    echo "skipped: the .deb packages (test_debian_packages.sh checks them, as root with lintian)"
elif command -v cpack >/dev/null && command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null; then
    # CPACK_CMAKE_GENERATOR=Ninja: with this build's generator (Unix Makefiles) cpack first
    # makes the "preinstall" target, i.e. all of this tree, which ctest's tree already is (a
    # scan of every target: half of cpack's 11 s); a generator without that step (ninja
    # itself is never run) leaves cpack to run cmake_install.cmake alone, the same files
    if run cpack 0 cpack -G DEB -B "$T/deb" --config "$BUILD/CPackConfig.cmake" -D CPACK_CMAKE_GENERATOR=Ninja; then
        so=$(readelf -d "$libdir/libsluice.so" | sed -n 's/.*SONAME.*libsluice\.so\.\([0-9.]*\)\]/\1/p')
        debs=""
        for p in "libsluice$so" libsluice-dev sluice-tools; do
            deb=$(ls "$T"/deb/"${p}_${VERSION}"-*_*.deb 2>/dev/null | head -1)
            if [ -z "$deb" ]; then fail "cpack made no ${p}_${VERSION}-*.deb: $(ls "$T/deb")"; continue; fi
            debs="$debs $deb"
            dpkg-deb -I "$deb" >"$T/deb-info-$p.out"
            dpkg-deb -c "$deb" >"$T/deb-files-$p.out"
        done
        if [ "$(echo $debs | wc -w)" = 3 ]; then
            dep=$(sed -n 's/^ Depends: //p' "$T/deb-info-libsluice$so.out")
            bad=""
            for d in libzmq5 libopenblas libturbojpeg0 libprotobuf-c1 libc6; do
                case "$dep" in *"$d"*) ;; *) bad="$bad $d" ;; esac
            done
            grep -q "^ Package: libsluice$so$" "$T/deb-info-libsluice$so.out" &&
                grep -q "^ Version: $VERSION-[0-9]" "$T/deb-info-libsluice$so.out" && [ -z "$bad" ] &&
                grep -q "^ Depends: libsluice$so (= $VERSION-" "$T/deb-info-libsluice-dev.out" &&
                ok "libsluice$so (SONAME libsluice.so.$so) Depends: $dep; libsluice-dev needs it" ||
                fail "dpkg-deb -I: missing$bad in: $(cat "$T"/deb-info-*.out)"
            missing=""
            for pf in "libsluice$so:lib/[a-z0-9_-]*/libsluice.so.$so.0" "libsluice$so:share/doc/libsluice$so/copyright" \
                libsluice-dev:usr/include/sluice/version.h "libsluice-dev:lib/[a-z0-9_-]*/libsluice.a" \
                "libsluice-dev:lib/[a-z0-9_-]*/libsluice.so -> libsluice.so.$so" libsluice-dev:pkgconfig/sluice.pc \
                libsluice-dev:cmake/sluice/sluiceConfig.cmake sluice-tools:usr/bin/sluice-train \
                sluice-tools:usr/bin/sluice-launch sluice-tools:usr/share/man/man1/sluice-train.1.gz \
                sluice-tools:usr/share/bash-completion/completions/sluice-record sluice-tools:share/doc/sluice-tools/changelog.Debian.gz; do
                grep -q "${pf#*:}\$" "$T/deb-files-${pf%%:*}.out" || missing="$missing ${pf%%:*}:${pf#*:}"
            done
            [ -z "$missing" ] && ok "dpkg-deb -c: library (multiarch), headers, static library, .so link, sluice.pc, sluiceConfig.cmake, tools, man pages, completions" ||
                fail "dpkg-deb -c lacks:$missing"
            # the library and -dev packages build a program, wherever they are unpacked
            for deb in $debs; do dpkg-deb -x "$deb" "$T/root"; done
            pcx=$(find "$T/root" -name sluice.pc)
            # shellcheck disable=SC2046
            if run deb-build 0 $CC -o "$T/app/hello_deb" "$T/app/hello.c" \
                $(PKG_CONFIG_PATH=$(dirname "$pcx") pkg-config --cflags --libs sluice); then
                check_hello "unpacked .deb" "$T/app/hello_deb" LD_LIBRARY_PATH="$(dirname "$pcx")/.."
            fi
        fi
    fi
else
    echo "skipped: the .deb (cpack, dpkg-deb or dpkg-shlibdeps missing)"
fi

# ---- add_subdirectory from a parent project ----
if [ -n "${SLUICE_TEST_NO_SUBDIR:-}" ]; then
    echo "skipped: add_subdirectory (SLUICE_TEST_NO_SUBDIR is set)"
else
    mkdir -p "$T/parent"
    cp "$T/app/hello.c" "$T/parent/"
    cat >"$T/parent/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.21)
project(parent LANGUAGES C)
add_subdirectory("$SRC" sluice)
add_executable(hello hello.c)
target_link_libraries(hello PRIVATE sluice::sluice)
EOF
    # reuse-objects COMPILER ARGS... -o OBJ -c SRC: for an object of the library (sluice_obj)
    # that this build has too, preprocess SRC with the same arguments (-E, output dropped;
    # the dependency file is still written), then copy this build's object to OBJ; any other
    # compile runs as it is
    cat >"$T/reuse-objects" <<'LAUNCHER'
#!/usr/bin/env bash
args=("$@") obj="" pre=()
for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
    -o) obj=${args[i + 1]}; pre+=(-o /dev/null); i=$((i + 1)) ;;
    -c) pre+=(-E) ;;
    *) pre+=("${args[i]}") ;;
    esac
done
case $obj in
*CMakeFiles/sluice_obj.dir/*)
    mine="$SLUICE_REUSE_BUILD/CMakeFiles/sluice_obj.dir/${obj#*CMakeFiles/sluice_obj.dir/}"
    if [ -f "$mine" ]; then "${pre[@]}" && cp "$mine" "$obj"; exit; fi ;;
esac
exec "$@"
LAUNCHER
    chmod +x "$T/reuse-objects"
    LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER="$T/reuse-objects")
    # (a CUDA build's objects are compiled for CUDA, which this parent project leaves out)
    if [ -n "${SLUICE_TEST_FULL:-}" ] || [ -n "$(find "$BUILD/CMakeFiles/sluice_obj.dir" -name '*.cu.o' | head -n 1)" ]; then
        LAUNCH=()
    fi
    # no build type: compiled without optimisation, the quickest; only the library and hello;
    # no "Building C object" lines (CMAKE_RULE_MESSAGES=OFF: a cmake process less per object,
    # a fifth of the build's CPU time)
    if run sub-configure 0 cmake -S "$T/parent" -B "$T/parent/build" -DSLUICE_CUDA=OFF -DSLUICE_PYTHON=OFF \
        -DCMAKE_RULE_MESSAGES=OFF "${LAUNCH[@]}"; then
        grep -q 'sluice: version' "$T/sub-configure.out" && ! grep -q 'add_test\|enable_testing' "$T/sub-configure.err" &&
            [ ! -d "$T/parent/build/sluice/tests" ] && ok "add_subdirectory: configured, tests off (not top level)" ||
            fail "add_subdirectory configure: tests were configured"
        if run sub-build 0 env SLUICE_REUSE_BUILD="$BUILD" cmake --build "$T/parent/build" -j"$(nproc)" --target hello; then
            check_hello "add_subdirectory" "$T/parent/build/hello"
            if [ ${#LAUNCH[@]} -gt 0 ]; then
                n=$(find "$T/parent/build/sluice" -path '*sluice_obj.dir*' -name '*.c.o' | wc -l)
                m=$(find "$BUILD/CMakeFiles/sluice_obj.dir" -name '*.c.o' | wc -l)
                [ "$n" -gt 0 ] && [ "$n" = "$m" ] && ok "add_subdirectory: $n library sources preprocessed there, objects of this build" ||
                    fail "add_subdirectory: $n library objects, this build has $m"
            fi
            # configured again, nothing changed: the same flags for every object, and the
            # build compiles nothing (a dependency's -isystem moving between the include list
            # and the flags on the second configure rebuilt every object)
            find "$T/parent/build" -name flags.make -exec md5sum {} + | sort >"$T/flags1"
            touch "$T/stamp"
            sleep 1
            if run sub-configure2 0 cmake -S "$T/parent" -B "$T/parent/build" &&
                run sub-build2 0 env SLUICE_REUSE_BUILD="$BUILD" cmake --build "$T/parent/build" --target hello; then
                find "$T/parent/build" -name flags.make -exec md5sum {} + | sort >"$T/flags2"
                n=$(find "$T/parent/build" -name '*.o' -newer "$T/stamp" | wc -l)
                if cmp -s "$T/flags1" "$T/flags2" && [ "$n" = 0 ]; then
                    ok "configured a second time: every object's flags the same, nothing compiled"
                else
                    fail "configured a second time: $n objects compiled again; flags that changed:"
                    diff "$T/flags1" "$T/flags2" | head -5
                fi
            fi
        fi
    fi
fi

[ "$fails" = 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all install checks passed"
