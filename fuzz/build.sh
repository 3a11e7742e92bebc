#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) into build/fuzz.
# The loaders under test (kiln/onnx/*.cpp, kiln/io/{safetensors,idx,npy}.cpp) are compiled into
# the targets, instrumented; the rest comes from the release build's libkiln.so (uninstrumented,
# GCC-built, so OpenMP is libgomp), which must exist: make build first. clang 16: clang 14 lacks
# the __builtin_source_location that libstdc++ 12's <source_location> needs.
# Usage: fuzz/build.sh   (CXX_FUZZ overrides the compiler)
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/fuzz
mkdir -p "$out/obj"
lib=build/release/kiln
[ -e "$lib/libkiln.so" ] || { echo "fuzz/build.sh: $lib/libkiln.so missing (make build)"; exit 1; }
CXX=${CXX_FUZZ:-clang++-16}
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -I. -DONNX_ML=1 -DONNX_NAMESPACE=onnx -fopenmp=libgomp)
# libkiln opens oneDNN, OpenBLAS and LAPACKE with dlopen on first use; linked here they load at
# start instead, so their thread_local data sits in static TLS: LeakSanitizer's exit-time scan
# of a dlopen()ed library's dynamic TLS crashes (glibc 2.36, clang 16: "Tracer caught signal
# 11" after "DTLS ... at 0x0002...").
libs=(-L"$lib" -lkiln -Wl,-rpath,"$PWD/$lib" -lonnx_proto -lprotobuf -lz -lgomp
      -Wl,--no-as-needed -ldnnl -lopenblas -llapacke -Wl,--as-needed)
objs=()
for src in kiln/onnx/*.cpp kiln/io/safetensors.cpp kiln/io/idx.cpp kiln/io/npy.cpp; do
  o="$out/obj/$(basename "${src%.cpp}").o"
  objs+=("$o")
  if [ ! -e "$o" ] || [ "$src" -nt "$o" ]; then
    echo "fuzz/build.sh: compiling $src"
    "$CXX" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$o" &
    while [ "$(jobs -r | wc -l)" -ge 2 ]; do wait -n; done
  fi
done
wait
onnx_objs=("$out"/obj/onnx_*.o "$out"/obj/saved_graph.o "$out"/obj/saved_jit.o "$out"/obj/external_data.o)
link() {  # name, sources and objects...
  local name=$1; shift
  echo "fuzz/build.sh: $name"
  "$CXX" "${flags[@]}" "$@" "${libs[@]}" -o "$out/$name"
}
link fuzz_onnx_import fuzz/fuzz_onnx_import.cpp "${onnx_objs[@]}"
link fuzz_saved_graph fuzz/fuzz_saved_graph.cpp "${onnx_objs[@]}"
link fuzz_safetensors -DKILN_FUZZ_LOADER=1 fuzz/fuzz_file_loaders.cpp "$out/obj/safetensors.o"
link fuzz_idx -DKILN_FUZZ_LOADER=2 fuzz/fuzz_file_loaders.cpp "$out/obj/idx.o"
link fuzz_npy -DKILN_FUZZ_LOADER=3 fuzz/fuzz_file_loaders.cpp "$out/obj/npy.o"
