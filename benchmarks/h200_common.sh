# Sourced by benchmarks/h200_run_*.sh: set RUN (a, b, c) first. Makes /tmp/numcheck-run-$RUN
# ($R), records the machine in $R/env.txt, installs the working tree, and defines `step`.
# Everything under $R comes back as $OUT/run-$RUN.tgz, re-packed after every step so that a
# run killed at its time limit still brings back what it finished.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}
R=/tmp/numcheck-run-$RUN
rm -rf "$R"; mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
} > "$R/env.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/pip.txt" 2>&1

step() {  # step NAME LIMIT_S CMD...: output in $R/NAME.txt, one line in $R/steps.txt
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local rc=$?
  printf '%-14s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -E 'passed|failed|error|rc=' "$R/$name.txt" | tail -1 | cut -c1-90)" >> "$R/steps.txt"
  tar czf "$OUT/run-$RUN.tgz" -C /tmp "numcheck-run-$RUN"
}
