#!/usr/bin/env bash
# H200 evidence, run A (correctness side): unit tests on the GPU, the CUDA gate serially and
# with 2 xdist workers (report, markdown, junit, compare), explain mode, the kernel audit,
# the example project, reference determinism, the self-test on CUDA, calibration on CUDA.
# Usage (repo root, GPU machine): OUT=/dir bash benchmarks/h200_run_a.sh
# Everything comes back as $OUT/run-a.tgz (benchmarks/h200_common.sh); prints the step table last.
RUN=a
source "$(dirname "$0")/h200_common.sh"
G=(--numcheck --numcheck-device cuda -q -rxs -p no:cacheprovider)
step unit-tests 200 python3 -m pytest tests -q -p no:cacheprovider -n 8 -rs
step gate-serial 120 python3 -m pytest "${G[@]}" --numcheck-report "$R/serial.json" \
  --numcheck-markdown "$R/serial.md" --junitxml "$R/junit.xml"
step gate-xdist 120 python3 -m pytest "${G[@]}" -n 2 --numcheck-report "$R/parallel.json"
step compare 30 python3 -m numcheck compare "$R/serial.json" "$R/parallel.json"
step explain 60 python3 -m pytest "${G[@]}" --numcheck-explain -k "v4flash-t64 or v4flash-b2-l1k-contiguous"
step audit 120 python3 benchmarks/audit_h200.py --out "$R"
step example 60 bash -c "cd examples/my_kernels && python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider"
step determinism 60 python3 benchmarks/determinism.py --device cuda --runs 20 --json "$R/determinism-cuda.json"
step reliability 120 python3 benchmarks/reliability_report.py --device cuda --seeds 10 --json "$R/reliability-cuda.json"
step calibrate 150 python3 -m numcheck.calibrate --device cuda --seeds 20 --json "$R/calibration-h200.json"
tar czf "$OUT/run-a.tgz" -C /tmp nc
cat "$R/env.txt"; sed -n '/numcheck summary/,/short test summary/p' "$R/gate-serial.txt" | cut -c1-160 | head -60
cat "$R/steps.txt"
