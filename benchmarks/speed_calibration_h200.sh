#!/usr/bin/env bash
# Speed thresholds from evidence: time every check of cases/perf.toml K times (default 5) in
# one pytest run and print speedup_min proposals per variant for this device class
# (pytest --numcheck --numcheck-perf --numcheck-calibrate-speed=K; rule in docs/perf/README.md).
# Usage (repo root, GPU machine):  OUT=/some/dir K=5 bash benchmarks/speed_calibration_h200.sh
# Writes: $OUT/env.txt, $OUT/speed-calibration.txt (the pytest output), $OUT/speed-runs.json
#         (every run's speedup and interval per check); when tomlkit is
#         installed also $OUT/perf.toml: cases/perf.toml with the proposals written in (the
#         working tree's copy is restored afterwards). Prints the proposals last.
# DEVICE, CASES, SELECT (a -k expression) and LIMIT (seconds) override the defaults, e.g. for
# a CPU smoke test: DEVICE=cpu CASES=cases/mhc.toml SELECT=v4flash-t64 K=2 bash ...
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-speed}
K=${K:-5}
DEVICE=${DEVICE:-cuda}
CASES=${CASES:-cases/perf.toml}
SELECT=${SELECT:-}
LIMIT=${LIMIT:-450}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The pytest plugin is found through the package's entry point: install the working tree.
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.txt" 2>&1 \
  || echo "pip install -e . failed (see pip.txt); using the installed numcheck"
CMD=(python3 -m pytest --numcheck --numcheck-perf --numcheck-device "$DEVICE" -p no:cacheprovider
     -q "$CASES" "--numcheck-calibrate-speed=$K" --numcheck-calibrate-json "$OUT/speed-runs.json")
[ -n "$SELECT" ] && CMD+=(-k "$SELECT")
if python3 -c "import tomlkit" 2>/dev/null; then
  CMD+=(--numcheck-calibrate-write)
  cp "$CASES" "$OUT/.backup.toml"
fi
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
    2>/dev/null || echo "nvidia-smi: none"
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import triton; print('triton', triton.__version__)" 2>/dev/null || echo "triton: none"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
  echo "command: PYTHONPATH=. ${CMD[*]}"
} 2>&1 | tee "$OUT/env.txt"
t0=$SECONDS
PYTHONPATH=. timeout "$LIMIT" "${CMD[@]}" > "$OUT/speed-calibration.txt" 2>&1
echo "pytest rc=$? ($((SECONDS - t0)) s)" | tee -a "$OUT/env.txt"
if [ -f "$OUT/.backup.toml" ]; then
  cp "$CASES" "$OUT/$(basename "$CASES")"
  cp "$OUT/.backup.toml" "$CASES" && rm -f "$OUT/.backup.toml"
fi
grep -E "^(FAILED|ERROR)" "$OUT/speed-calibration.txt" | head -20
sed -n '/numcheck calibrate: suggested speedup_min/,$p' "$OUT/speed-calibration.txt" | cut -c1-220
