#!/usr/bin/env bash
# H200 run K: the precision classes as users implement them (issue 29) on CUDA, in under
# 8 minutes on one H200. The honest families now hold the members numcheck derives from each
# op's GEMM site (numcheck.gemm_impls: TF32 with operands rounded to nearest and truncated,
# bf16 writing bf16 or fp32, one pass / K-blocks / split-K, emulated bit for bit) and, on
# CUDA, the real ones: cuBLAS (TF32 allowed, bf16 in and out, bf16 in and fp32 out) and a
# Triton tl.dot kernel with the library's defaults. References are made on the host CPU, as
# the shipped goldens are.
#
#   1. cal:     the widened families on calibration seeds 4000.. (CAL_SEEDS, default 20; mHC
#               cases first, so a run stopped at its limit keeps them), every shipped case
#   2. heldout: the same on held-out seeds HELD_FIRST.. (HELD_SEEDS, default 10; 11000 ..
#               11009 set nothing), judged by python -m numcheck.heldout against the case files
#   3. catch:   every planted bug (the tf32-class ones included) on the shipped goldens and 3
#               fresh seeds, with each bug's own error against its class's family
#
# Usage (repo root, GPU machine):
#   OUT=/dir bash benchmarks/h200_tf32_families.sh
# Knobs: CAL_SEEDS, HELD_SEEDS, HELD_FIRST, CATCH_SEEDS, DEVICE (cuda; cpu tests the
# plumbing), SELECT (-k: only cases whose id contains it; the catch step runs every case),
# SCALE (multiplies every step's time limit: 270 s, 110 s and 80 s, 7.7 minutes in all).
# Writes 8 files to $OUT (env.txt, steps.txt, {cal,heldout,catch}.txt and three JSON files)
# and prints a short table last. Each step has a time limit; the JSON files are written as
# the steps go, so a step stopped at its limit keeps what it finished.
#
# Then, in the repository (docs/budgets.md, "TF32 as users implement it"):
#   python benchmarks/honest_calibration.py --apply docs/honest-calibration-classes-cpu.json \
#       $OUT/honest-calibration-h200.json --note "<n> CPU + <m> H200 seeds"
#   python -m numcheck.heldout docs/honest-heldout-classes-cpu.json $OUT/honest-heldout-h200.json
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}
CAL_SEEDS=${CAL_SEEDS:-20}
HELD_SEEDS=${HELD_SEEDS:-10}
HELD_FIRST=${HELD_FIRST:-11000}
CATCH_SEEDS=${CATCH_SEEDS:-3}
DEVICE=${DEVICE:-cuda}
SELECT=${SELECT:-}
SCALE=${SCALE:-1}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
: > "$OUT/steps.txt"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'threads', torch.get_num_threads())"
  python3 -c "import triton; print('triton', triton.__version__)" 2>&1 | tail -1
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
  echo "device $DEVICE, calibration seeds 4000..$((4000 + CAL_SEEDS - 1)), held out" \
       "$HELD_FIRST..$((HELD_FIRST + HELD_SEEDS - 1)), select '${SELECT}'"
} > "$OUT/env.txt" 2>&1

step() {  # step NAME LIMIT_S CMD...: output in $OUT/NAME.txt, one line in $OUT/steps.txt
  local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$(python3 -c "print(int($limit * $SCALE))")" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  printf '%-8s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" >> "$OUT/steps.txt"
}

step cal 270 python3 benchmarks/honest_calibration.py --device "$DEVICE" --ops mhc_pre indexer \
  --seeds "$CAL_SEEDS" --first-seed 4000 -k "$SELECT" --json "$OUT/honest-calibration-h200.json"
step heldout 110 python3 benchmarks/honest_calibration.py --device "$DEVICE" \
  --ops mhc_pre indexer --seeds "$HELD_SEEDS" --first-seed "$HELD_FIRST" -k "$SELECT" \
  --json "$OUT/honest-heldout-h200.json"
python3 -m numcheck.heldout "$OUT/honest-heldout-h200.json" >> "$OUT/heldout.txt" 2>&1
step catch 80 python3 benchmarks/reliability_report.py --device "$DEVICE" --seeds "$CATCH_SEEDS" \
  --first-seed "$HELD_FIRST" --skip false --json "$OUT/catch-h200.json"

# The short table: per op, class and output, the family's worst over the calibration seeds
# and cases (with the member behind it), the held-out verdict, the tf32-class bugs.
cat "$OUT/env.txt"
python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
try:
    cal = json.loads((out / "honest-calibration-h200.json").read_text())["cases"]
except (OSError, ValueError, KeyError) as exc:
    cal = {}
    print(f"no calibration file: {exc}")
worst = {}
for key, fams in cal.items():
    op = key.split("::")[0]
    for prec, res in fams.items():
        for member, outputs in res["by_variant"].items():
            for output, m in outputs.items():
                for metric in ("max_err_ratio", "calc_diff"):
                    if metric in m:
                        row = worst.setdefault((op, prec, output, metric), (0.0, "", ""))
                        if m[metric] > row[0]:
                            worst[(op, prec, output, metric)] = (m[metric], member, key)
print("| op | class | output | worst max_err_ratio (member) | worst calc_diff (member) |")
print("|---|---|---|---|---|")
for op, prec, output in sorted({k[:3] for k in worst}):
    cells = []
    for metric in ("max_err_ratio", "calc_diff"):
        v, member, _ = worst.get((op, prec, output, metric), (float("nan"), "-", ""))
        cells.append(f"{v:.3g} ({member})")
    print(f"| {op} | {prec} | {output} | {cells[0]} | {cells[1]} |")
held = (out / "heldout.txt").read_text().strip().splitlines() if (out / "heldout.txt").exists() else []
print("held out:", held[-1] if held else "no result")
try:
    catch = json.loads((out / "catch-h200.json").read_text())
    tf32 = [r for r in catch.get("fresh_catch", []) if "::tf32_" in r["bug"]]
    big = [r for r in catch.get("fresh_catch", []) if r.get("own_error", 0) >= 2]
    shipped = [r for r in catch.get("shipped_catch", []) if "::tf32_" in r["bug"]]
    print(f"tf32-class bugs: shipped cases {sum(r['caught'] for r in shipped)}/{len(shipped)}, "
          f"fresh seeds {sum(r['caught'] for r in tf32)}/{len(tf32)} (own error "
          f"{min((r['own_error'] for r in tf32), default=float('nan')):.3g}x and up); every bug "
          f"with own error >= 2x caught: {sum(r['caught'] for r in big)}/{len(big)}")
except (OSError, ValueError) as exc:
    print(f"no catch file: {exc}")
EOF
cat "$OUT/steps.txt"
