#!/usr/bin/env bash
# One device run of the core harness on a GPU machine (see docs/budgets.md):
#   calibration over fresh seeds, the numcheck gate on CUDA, and the unit tests.
# Usage (repo root, GPU machine): OUT=/some/dir bash benchmarks/gpu_core_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "$OUT/env.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
python3 -m numcheck.calibrate --device cuda --seeds "${SEEDS:-20}" --json "$OUT/calibration-cuda.json" \
  > "$OUT/calibration-cuda.txt" 2>&1; echo "calibrate rc=$?"
python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider 2>&1 | tee "$OUT/numcheck-cuda.txt" | tail -45
python3 -m pytest tests -q -p no:cacheprovider -x 2>&1 | tee "$OUT/tests-gpu.txt" | tail -5
