#!/usr/bin/env bash
# Runs every libFuzzer target from build/fuzz (fuzz/build.sh) for SECONDS each (default 20) on a
# working copy of its seed corpus (fuzz/corpus/<target>, kept unchanged), with malloc and RSS
# limits so that an allocation a small input does not justify counts as a failure. Prints each
# target's executions; exits non-zero on the first crash, leak, sanitizer report or timeout
# (the reproducer is left in build/fuzz/artifacts/). Usage: fuzz/run.sh [SECONDS] [target ...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(onnx_import saved_graph safetensors idx npy)
mkdir -p build/fuzz/artifacts
for t in "${targets[@]}"; do
  work=build/fuzz/corpus/$t
  mkdir -p "$work"
  cp -n fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  log=build/fuzz/$t.log
  if ! build/fuzz/fuzz_"$t" "$work" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2560 \
       -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build/fuzz/artifacts/"$t"- \
       > "$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $t FAILED (log $log)"
    exit 1
  fi
  runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  echo "fuzz: $t: $runs executions in ${secs} s, $cov, corpus $(ls "$work" | wc -l) files, no crash"
done
