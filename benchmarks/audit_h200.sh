#!/usr/bin/env bash
# One device run of the cast ledger and kernel audit on a GPU machine:
#   the ledger/kernel unit tests on the GPU, the numcheck gate on CUDA (casts + kernels
#   gates active), explain mode on two small cases, then the production-shape audit
#   (benchmarks/audit_h200.py), whose short table is printed last.
# Usage (repo root, GPU machine):
#   pip install --no-deps --no-build-isolation -e . && OUT=/some/dir bash benchmarks/audit_h200.sh
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-audit}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} 2>&1 | tee "$OUT/env.txt"
python3 -m pytest tests/test_kernels.py tests/test_casts.py tests/test_overhead.py -q \
  -p no:cacheprovider 2>&1 | tee "$OUT/tests-gpu.txt" | tail -3
python3 -m pytest --numcheck --numcheck-device cuda -q -rx -p no:cacheprovider 2>&1 \
  | tee "$OUT/numcheck-cuda.txt" | tail -40
python3 -m pytest --numcheck --numcheck-device cuda --numcheck-explain -q -p no:cacheprovider \
  -k "v4flash-t64 or v4flash-b2-l1k-contiguous" > "$OUT/explain-cuda.txt" 2>&1
echo "explain rc=$? ($(wc -l < "$OUT/explain-cuda.txt") lines in explain-cuda.txt)"
python3 benchmarks/audit_h200.py --out "$OUT" > "$OUT/audit-stdout.txt" 2>&1
echo "audit rc=$?"
tail -n 12 "$OUT/audit-stdout.txt"
