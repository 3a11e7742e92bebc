#!/usr/bin/env bash
# Install test: `cmake --install` the build into a temporary prefix, check what landed there,
# then build and run tests/install/consumer.cpp out of tree twice: as a CMake project with
# find_package(kiln), and with a bare compiler line from `pkg-config --cflags --libs kiln`.
# Usage: run_install_test.sh BUILD_DIR SOURCE_DIR [CMAKE] [CXX] [GENERATOR] [MAKE_PROGRAM]
# Writes only under a temporary directory, removed at exit.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${3:-cmake}
cxx=${4:-c++}
generator=${5:-Ninja}
make_program=${6:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "install test: FAIL: $*" >&2; exit 1; }

echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "install"; }

# GNUInstallDirs may choose lib or lib/<multiarch>: take the directory the library landed in.
lib=$(find "$prefix" -name 'libkiln.so' -printf '%h\n' | head -n 1)
[ -n "$lib" ] || fail "no libkiln.so under $prefix"
soname=$(readelf -d "$lib/libkiln.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "libdir: ${lib#"$prefix"/}; soname: $soname; $(cd "$lib" && find . -name 'libkiln.so*' -printf '%f ')"
[[ $soname == libkiln.so.[0-9]* ]] || fail "soname is '$soname'"
[ -f "$prefix/include/kiln/kiln.h" ] || fail "kiln/kiln.h not installed"
[ -f "$lib/cmake/kiln/kilnConfig.cmake" ] || fail "no CMake package config"
[ -f "$lib/pkgconfig/kiln.pc" ] || fail "no kiln.pc"
# Only the library, headers and package files: no tests, examples, benchmarks or GoogleTest.
stray=$(cd "$prefix" && find . -type f ! -path './include/kiln/*.h' ! -path "./${lib#"$prefix"/}/*")
[ -z "$stray" ] || fail "unexpected files installed: $stray"
echo "installed: $(find "$prefix/include" -name '*.h' | wc -l) headers," \
  "$(find "$lib" -type f | wc -l) files under ${lib#"$prefix"/}"

# Fused kernels compiled at run time (checked below: the installed library's codegen works) go
# to a cache of this test's own.
unset KILN_CODEGEN
export KILN_CACHE_DIR=$tmp/kernel-cache
# Kernels compile on the caller's thread here: in the background (the default) a program that
# exits within milliseconds may leave before its kernel is written, and the checks below would
# race it (a CI rehearsal failed so).
export KILN_CODEGEN_ASYNC=0

echo "== find_package(kiln): CMake consumer"
gen_args=(-G "$generator")
[ -n "$make_program" ] && gen_args+=(-DCMAKE_MAKE_PROGRAM="$make_program")
# The consumer may find only this prefix's kiln (no user or system package registry).
"$cmake" -S "$src/tests/install" -B "$tmp/cmake-consumer" "${gen_args[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF \
  >"$tmp/configure.log" || { cat "$tmp/configure.log"; fail "configure"; }
grep -- "-- kiln " "$tmp/configure.log" | sed "s|$tmp|\$tmp|"
grep -q -- "-- kiln .* from $lib/cmake/kiln" "$tmp/configure.log" || fail "kiln not found in $prefix"
"$cmake" --build "$tmp/cmake-consumer" -j 2 >"$tmp/build.log" || { cat "$tmp/build.log"; fail "CMake build"; }
# No LD_LIBRARY_PATH: the imported target's location is in the program's RPATH.
"$tmp/cmake-consumer/consumer" | tee "$tmp/cmake.out" || fail "CMake consumer exited with $?"
grep -qx "kiln consumer: ok" "$tmp/cmake.out" || fail "CMake consumer"
ls "$KILN_CACHE_DIR"/*.so >/dev/null 2>&1 || fail "no fused kernel compiled at run time"

echo "== pkg-config kiln: compiler-line consumer"
export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --variable=pcfiledir kiln)" = "$lib/pkgconfig" ] || fail "kiln.pc not found in $prefix"
flags=$(pkg-config --cflags --libs kiln)
echo "pkg-config --modversion: $(pkg-config --modversion kiln); flags: ${flags//$tmp/\$tmp}"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -O2 "$src/tests/install/consumer.cpp" -o "$tmp/pc-consumer" $flags
rm -rf "$KILN_CACHE_DIR"  # compile the fused kernel again, from this program
LD_LIBRARY_PATH=$(pkg-config --variable=libdir kiln) "$tmp/pc-consumer" | tee "$tmp/pc.out" ||
  fail "pkg-config consumer exited with $?"
grep -qx "kiln consumer: ok" "$tmp/pc.out" || fail "pkg-config consumer"
ls "$KILN_CACHE_DIR"/*.so >/dev/null 2>&1 || fail "no fused kernel compiled at run time"
echo "install test: ok"
