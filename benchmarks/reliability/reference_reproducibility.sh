#!/usr/bin/env bash
# The FP32 reference across thread counts and CPU instruction sets, against the shipped goldens
# (which were made on another CPU). Prints one WORST line per setting; JSON per setting in $OUT.
# Usage, from the repository root:
#   OUT=/tmp/repro benchmarks/reliability/reference_reproducibility.sh
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-repro}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-.}
grep -m1 'model name' /proc/cpuinfo || true
for isa in default avx2 avx512; do
  for threads in 1 2; do
    ATEN_CPU_CAPABILITY=$isa python -m benchmarks.reliability.reference_reproducibility \
      --threads "$threads" --json "$OUT/repro-$isa-t$threads.json" > "$OUT/repro-$isa-t$threads.txt" 2>&1 \
      && tail -n 1 "$OUT/repro-$isa-t$threads.txt" \
      || echo "isa=$isa threads=$threads: did not run (instruction set not supported by this CPU?)"
  done
done
