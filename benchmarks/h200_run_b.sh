#!/usr/bin/env bash
# H200 evidence, run B (performance side): the perf cases with --numcheck-perf and
# pytest-benchmark JSON, numcheck's speedup against independent timers (fidelity, 5 runs),
# the fused kernels at production shapes, calibration and determinism on CUDA.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_b.sh
# Everything comes back as $OUT/run-b.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=b
source "$(dirname "$0")/h200_common.sh"
step perf 250 python3 -m pytest --numcheck --numcheck-perf --numcheck-device cuda -p no:cacheprovider \
  -rxXs cases/perf.toml --benchmark-json "$R/bench.json" \
  --numcheck-report "$R/perf-report.json" --benchmark-columns=median,iqr,min,max,rounds
step table 20 python3 benchmarks/perf_table.py "$R/bench.json"
step fidelity 80 python3 benchmarks/fidelity.py --repeats 5 --json "$R/fidelity.json"
step fused 150 env OUT="$R" python3 benchmarks/fused_h200.py --budget-s 110
step calibrate 110 python3 -m numcheck.calibrate --device cuda --seeds 20 --json "$R/calibration-h200.json"
step determinism 40 python3 benchmarks/determinism.py --device cuda --runs 10 --json "$R/determinism-cuda.json"
cat "$R/env.txt"; tail -30 "$R/table.txt"; tail -12 "$R/fidelity.txt"; tail -14 "$R/fused.txt"
cat "$R/steps.txt"
