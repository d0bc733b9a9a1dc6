#!/usr/bin/env bash
# The HTML report and the summary layout from a CUDA run (README "The HTML report").
#
#   OUT=/tmp/out bash benchmarks/html_gpu.sh          # from the repository root, PYTHONPATH=.
#
# Runs a few cases on CUDA with timing, writes the JSON report, the HTML page (plots when
# matplotlib is installed) and, for a failure, its obtained file; rebuilds the page from the
# saved report; prints one line per check: what the page got (plot data, timer, interval).
# Takes about a minute on one H200. DEVICE=cpu and PERF= make it runnable on a CPU.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
DEVICE=${DEVICE:-cuda}
PERF=${PERF---numcheck-perf}
CASES=${CASES:-cases/indexer.toml::v4flash-b4-l2k cases/mhc.toml::v4pro-t32 cases/perf.toml::perf-mhc-v4pro-t64-decode}
mkdir -p "$OUT"
python -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>/dev/null \
  || echo "matplotlib: not installed (the page has tables only)"
# shellcheck disable=SC2086
python -m pytest --numcheck --numcheck-device "$DEVICE" $PERF -p no:cacheprovider -q $CASES \
  --numcheck-report "$OUT/report.json" --numcheck-html "$OUT/report.html" \
  --numcheck-obtained "$OUT/obtained" > "$OUT/pytest.txt" 2>&1
echo "pytest exit status $? (output: $OUT/pytest.txt)"
grep -E "perf-only|tf32 = fp32|casts and copies" "$OUT/pytest.txt" || true
python -m numcheck html "$OUT/report.json" "$OUT/report-again.html"
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
report = json.loads((out / "report.json").read_text())
page = (out / "report.html").read_text()
print(f"page {len(page) / 1e6:.2f} MB, {page.count('<img ')} plots; "
      f"every check on it: {all(r['id'] in page for r in report['records'])}")
print(f"{'check':48} {'status':6} {'plots':22} timing")
for r in report["records"]:
    plots = r.get("plots") or {}
    kinds = "+".join(f"{k}:{len(v)}" for k, v in plots.items()) or "-"
    t = r.get("timing") or {}
    timing = (f"{t['speedup']:.3f}x [{t['ci_low']:.3f}, {t['ci_high']:.3f}] {t.get('timer')}"
              if t.get("speedup") is not None else "-")
    print(f"{r['id'][:48]:48} {r['status']:6} {kinds[:22]:22} {timing}  {r.get('note') or ''}")
PY
