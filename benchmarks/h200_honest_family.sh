#!/usr/bin/env bash
# The GPU side of the two-sided self-test (docs/reliability.md, "Honest families"): shipped
# variants and the honest families on 10 fresh seeds on CUDA, the planted-bug catch table on
# the shipped goldens, and the fresh-seed catch rate on 3 seeds. References are made on the
# host CPU, as the shipped goldens are. One H200: about 3-4 minutes; each step has a limit so
# the run ends inside 5 minutes and brings back what it finished.
#
#   OUT=/some/dir PYTHONPATH=. bash benchmarks/h200_honest_family.sh
#
# Writes $OUT/reliability-cuda.json, $OUT/reliability-cuda.md, $OUT/env.txt; the short table
# (the summary) is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/numcheck-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'threads', torch.get_num_threads())"
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit: /'
} > "$OUT/env.txt" 2>&1
# 1. false failures: shipped variants and honest families, every shipped case, 10 seeds.
timeout 170 python3 benchmarks/reliability_report.py --device cuda --seeds 10 \
  --skip shipped fresh --json "$OUT/false-failures-cuda.json" > "$OUT/false-failures-cuda.md" 2>&1
echo "rc=$?" >> "$OUT/false-failures-cuda.md"
# 2. planted bugs: every shipped case on its golden, and 3 fresh seeds on the cheap cases.
timeout 110 python3 benchmarks/reliability_report.py --device cuda --seeds 3 \
  --skip false --json "$OUT/catch-cuda.json" > "$OUT/catch-cuda.md" 2>&1
echo "rc=$?" >> "$OUT/catch-cuda.md"
cat "$OUT/env.txt"
grep -v '| 0 | - |$' "$OUT/false-failures-cuda.md" | grep -e '| yes |' -e '| shipped |' | head -20
# The short tables last: catch per kind, then the summaries of both runs.
sed -n '/^| kind |/,/^$/p' "$OUT/catch-cuda.md"
tail -n 8 "$OUT/catch-cuda.md" | grep -v false
tail -n 4 "$OUT/false-failures-cuda.md"
