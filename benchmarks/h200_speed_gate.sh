#!/usr/bin/env bash
# Evidence for the speedup gate on one GPU (docs/perf/README.md, "Evidence"). Repo root:
#
#   OUT=/some/dir PYTHONPATH=. bash benchmarks/h200_speed_gate.sh
#
# Steps, each selectable by an environment variable (defaults in brackets):
#   CALIB_RUNS=K   [3]  (a) K fresh runs of the perf suite (cases/perf.toml + the evidence-only
#                       case with the ~5%-slowed variant): per-run line, then per-check
#                       median speedup / min..max / widest interval / timer / decision time,
#                       for setting thresholds. Each run also shows (c): slowed variant and
#                       round trip caught or not.
#   INDEPENDENT=1  [1]  (b) every gated check of the last run re-timed by an independent
#                       graph-replay timer (triton.testing.do_bench_cudagraph): ratio to
#                       numcheck's speedup, target within 2%.
#   XDIST=1        [1]  (d) one run with -n $WORKERS [4] on the GPU against a serial run (the
#                       first calibration run, or a fresh one): same verdicts, overlapping
#                       intervals, lock waits, gpu_sharing.
#   EVIDENCE_RUNS=N [0] N more fresh runs (tag "evidence"): failed checks per run (target 0),
#                       slowed caught (target >= 9/10), round trip caught (10/10), wall time.
#   SLOWED_MIN=x [1.08] threshold of the evidence-only case (bf16 must pass it, the slowed
#                       variant must fail it).
#   BUDGET_S [480]      no step or run starts that would end after this many seconds.
# Writes everything under $OUT; prints a short table last.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-speed-gate}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH=${PYTHONPATH:-.}
CALIB_RUNS=${CALIB_RUNS:-3}
INDEPENDENT=${INDEPENDENT:-1}
XDIST=${XDIST:-1}
WORKERS=${WORKERS:-4}
EVIDENCE_RUNS=${EVIDENCE_RUNS:-0}
SLOWED_MIN=${SLOWED_MIN:-1.08}
BUDGET_S=${BUDGET_S:-480}
DEVICE=${DEVICE:-cuda}
TINY=${TINY:-}   # CPU dry run of the plumbing: DEVICE=cpu TINY=--tiny
START=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - START))); }
SG=(python3 benchmarks/speed_gate.py)

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -2
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import triton; print('triton', triton.__version__)" 2>/dev/null || echo "triton: none"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
  echo "CALIB_RUNS=$CALIB_RUNS INDEPENDENT=$INDEPENDENT XDIST=$XDIST WORKERS=$WORKERS EVIDENCE_RUNS=$EVIDENCE_RUNS SLOWED_MIN=$SLOWED_MIN BUDGET_S=$BUDGET_S"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# pytest finds the plugin through the installed entry point; PYTHONPATH=. makes this tree's
# code win. Install (editable) only where numcheck is not installed at all.
if ! python3 -c "import importlib.metadata as m; m.distribution('numcheck')" 2>/dev/null; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.txt" 2>&1 \
    || echo "pip install -e . failed (see $OUT/pip.txt)"
fi

if [ "$CALIB_RUNS" -gt 0 ]; then
  echo "== (a)+(c) $CALIB_RUNS fresh runs ($(left) s left)"
  "${SG[@]}" runs "$OUT" --tag calib --runs "$CALIB_RUNS" --device "$DEVICE" \
    --slowed-min "$SLOWED_MIN" --budget-s "$(left)" $TINY | tee "$OUT/calib-lines.txt"
  "${SG[@]}" table "$OUT" --tag calib | tee "$OUT/calib-table.txt"
fi

LAST=$(ls -t "$OUT"/calib-[0-9]*.json 2>/dev/null | head -1)
if [ "$INDEPENDENT" = 1 ] && [ "$(left)" -gt 60 ]; then
  if [ -z "$LAST" ]; then
    "${SG[@]}" runs "$OUT" --tag calib --runs 1 --device "$DEVICE" --slowed-min "$SLOWED_MIN" $TINY
    LAST=$(ls -t "$OUT"/calib-[0-9]*.json | head -1)
  fi
  echo "== (b) independent graph-replay timer vs $LAST ($(left) s left)"
  timeout "$(left)" "${SG[@]}" independent "$LAST" --json "$OUT/independent.json" --cases "$OUT/work/cases" \
    | tee "$OUT/independent.txt"
fi

if [ "$XDIST" = 1 ] && [ "$(left)" -gt 90 ]; then
  SERIAL=$(ls -t "$OUT"/calib-[0-9]*.json 2>/dev/null | tail -1)
  if [ -z "$SERIAL" ]; then
    "${SG[@]}" runs "$OUT" --tag serial --runs 1 --device "$DEVICE" --slowed-min "$SLOWED_MIN" $TINY
    SERIAL="$OUT/serial-1.json"
  fi
  echo "== (d) -n $WORKERS on one GPU vs serial ($(left) s left)"
  "${SG[@]}" runs "$OUT" --tag xdist --runs 1 -n "$WORKERS" --device "$DEVICE" \
    --slowed-min "$SLOWED_MIN" $TINY | tee "$OUT/xdist-lines.txt"
  [ -f "$OUT/xdist-1.json" ] && "${SG[@]}" xdist "$SERIAL" "$OUT/xdist-1.json" | tee "$OUT/xdist.txt"
fi

if [ "$EVIDENCE_RUNS" -gt 0 ]; then
  echo "== fresh-run evidence: $EVIDENCE_RUNS runs ($(left) s left)"
  "${SG[@]}" runs "$OUT" --tag evidence --runs "$EVIDENCE_RUNS" --device "$DEVICE" \
    --slowed-min "$SLOWED_MIN" --budget-s "$(left)" $TINY | tee "$OUT/evidence-lines.txt"
  "${SG[@]}" table "$OUT" --tag evidence > "$OUT/evidence-table.txt"
fi

echo
echo "== summary ($((SECONDS - START)) s)"
for f in calib-lines evidence-lines; do
  [ -f "$OUT/$f.txt" ] && grep -E "^(calib|evidence): " "$OUT/$f.txt"
done
[ -f "$OUT/calib-table.txt" ] && cat "$OUT/calib-table.txt"
[ -f "$OUT/independent.txt" ] && tail -1 "$OUT/independent.txt"
[ -f "$OUT/xdist.txt" ] && tail -2 "$OUT/xdist.txt"
