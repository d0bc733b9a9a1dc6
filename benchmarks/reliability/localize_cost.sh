#!/usr/bin/env bash
# What localization costs a failing run: `pytest --numcheck` over the shipped cases (CPU),
# with the planted bugs of tests/planted_located.py added as variants of every case (so many
# checks fail and are localized), timed with localization on and off (NUMCHECK_LOCALIZE=0),
# alternating, RUNS times each.
#
#   bash benchmarks/reliability/localize_cost.sh   # OUT=/tmp/localize_cost RUNS=2 by default
#
# Prints one line per run and the median of each, then the relative cost.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-/tmp/localize_cost}"
RUNS="${RUNS:-2}"
PROJ="$OUT/proj"
rm -rf "$PROJ" && mkdir -p "$PROJ"
cp -r "$ROOT/cases" "$ROOT/goldens" "$PROJ/"
printf '[pytest]\naddopts = --numcheck-device cpu -p no:cacheprovider\n' > "$PROJ/pytest.ini"
cat > "$PROJ/conftest.py" <<PY
from tests import planted_located
planted_located.register_all()
PY
cd "$PROJ"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
: > "$OUT/times.txt"
for i in $(seq "$RUNS"); do
  for mode in 1 0; do
    start=$(date +%s.%N)
    NUMCHECK_LOCALIZE=$mode python -m pytest --numcheck -q > "$OUT/run-$mode-$i.txt" 2>&1 || true
    end=$(date +%s.%N)
    secs=$(python -c "print(f'{$end - $start:.2f}')")
    tail -1 "$OUT/run-$mode-$i.txt" | sed "s/^/localize=$mode run $i: $secs s: /"
    echo "$mode $secs" >> "$OUT/times.txt"
  done
done
python - "$OUT/times.txt" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
on = statistics.median(float(s) for m, s in rows if m == "1")
off = statistics.median(float(s) for m, s in rows if m == "0")
print(f"| localization | median wall s |\n|---|---|\n| on | {on:.2f} |\n| off | {off:.2f} |")
print(f"cost of localization: {100 * (on / off - 1):+.1f}% of a failing run")
PY
