#!/usr/bin/env bash
# One device run for the extension API (issue 6) on a GPU machine: the example project's
# gate on CUDA against its CPU-made goldens, plus the registration / fixture / API tests.
# Usage (repo root, GPU machine): OUT=/some/dir bash benchmarks/gpu_extending_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
root=$PWD
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} 2>&1 | tee "$OUT/env.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
(cd examples/my_kernels && python3 -m pytest --numcheck --numcheck-device cuda -q \
  -p no:cacheprovider) > "$OUT/example-cuda.txt" 2>&1; gate=$?
(cd examples/my_kernels && python3 -m pytest -q -p no:cacheprovider) \
  > "$OUT/example-fixture.txt" 2>&1; fixture=$?
python3 -m pytest tests/test_registration.py tests/test_golden_check.py tests/test_public_api.py \
  -q -p no:cacheprovider > "$OUT/tests-gpu.txt" 2>&1; unit=$?
cd "$root"
sed -n '/numcheck summary/,$p' "$OUT/example-cuda.txt" | head -12
printf '\n%-44s %s\n' "step" "result"
printf '%-44s %s\n' "example gate on cuda (pytest --numcheck)" "rc=$gate $(tail -1 "$OUT/example-cuda.txt")"
printf '%-44s %s\n' "example fixture tests (pytest)" "rc=$fixture $(tail -1 "$OUT/example-fixture.txt")"
printf '%-44s %s\n' "extension unit tests" "rc=$unit $(tail -1 "$OUT/tests-gpu.txt")"
