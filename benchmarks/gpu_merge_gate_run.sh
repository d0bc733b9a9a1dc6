#!/usr/bin/env bash
# The merge gate on a GPU machine: serial vs one xdist worker per GPU, the same
# records either way, baseline drift between the two, and the plugin tests on CUDA.
# Usage (repo root, GPU machine): OUT=/some/dir bash benchmarks/gpu_merge_gate_run.sh
# Writes under $OUT: serial.json, parallel.json, parallel.md, junit.xml, drift.md, log.txt.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log="$OUT/log.txt"
{
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
} 2>&1 | tee "$log"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
gpus=$(python3 -c "import torch; print(max(torch.cuda.device_count(), 1))")
workers=$(( gpus > 1 ? gpus : 2 ))   # one GPU: still two workers, both pinned to cuda:0

t0=$(date +%s.%N)
python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider \
  --numcheck-report "$OUT/serial.json" >>"$log" 2>&1; serial_rc=$?
t1=$(date +%s.%N)
python3 -m pytest --numcheck --numcheck-device cuda -q -p no:cacheprovider -n "$workers" \
  --numcheck-report "$OUT/parallel.json" --numcheck-markdown "$OUT/parallel.md" \
  --junitxml "$OUT/junit.xml" >>"$log" 2>&1; parallel_rc=$?
t2=$(date +%s.%N)
python3 -m numcheck compare "$OUT/serial.json" "$OUT/parallel.json" --markdown "$OUT/drift.md" \
  >>"$log" 2>&1; compare_rc=$?
python3 -m pytest tests/test_plugin_report.py tests/test_workers.py tests/test_drift.py \
  tests/test_report.py -q -p no:cacheprovider -rs >>"$log" 2>&1; tests_rc=$?
tail -25 "$log"

python3 - "$OUT" "$serial_rc" "$parallel_rc" "$compare_rc" "$tests_rc" "$t0" "$t1" "$t2" <<'PY'
import json, sys
from collections import Counter
out, src, prc, crc, trc, t0, t1, t2 = sys.argv[1:]
s = json.load(open(f"{out}/serial.json"))
p = json.load(open(f"{out}/parallel.json"))
strip = lambda r: {k: v for k, v in r.items() if k not in ("worker", "device_index")}
same = [strip(r) for r in s["records"]] == [strip(r) for r in p["records"]]
place = Counter((r["worker"], r["device_index"], r["device_name"]) for r in p["records"])
print(f"\n{'what':<34} {'value'}")
print(f"{'serial gate (rc, s, gate)':<34} {src}, {float(t1)-float(t0):.1f}, {s['gate']} {s['counts']}")
print(f"{'xdist gate (rc, s, gate)':<34} {prc}, {float(t2)-float(t1):.1f}, {p['gate']} {p['counts']}")
print(f"{'records identical serial vs -n':<34} {same}")
print(f"{'compare serial -> parallel rc':<34} {crc}")
print(f"{'plugin/report tests rc':<34} {trc}")
for (w, i, n), c in sorted(place.items(), key=str):
    print(f"{'worker ' + str(w) + ' -> cuda:' + str(i):<34} {c} checks on {n}")
PY
