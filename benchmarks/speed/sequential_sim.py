"""The stopping rule's error rates on synthetic paired samples (docs/speed.md's table).

    python -m benchmarks.speed.sequential_sim --trials 1000

Pure and seeded (numcheck.perf.sequential.simulate): no clock, no device. Each row: a true
speedup, a threshold, the per-sample noise (lognormal, relative) and the share of samples hit
by a 2-5x outlier; the rates of pass / fail / undecided over the trials, and the mean number
of pairs the rule drew. "uncorrected" looks at a plain 95% interval after every batch (the
mistake the Bonferroni split avoids), for comparison.
"""

from __future__ import annotations

import argparse

from numcheck.perf.sequential import StoppingRule, simulate

#: (label, true speedup, threshold, noise, heavy-tail share)
SCENARIOS = [
    ("at the threshold, 1% noise", 1.05, 1.05, 0.01, 0.0),
    ("at the threshold, 3% noise", 1.05, 1.05, 0.03, 0.0),
    ("at the threshold, 3% noise + 5% outliers", 1.05, 1.05, 0.03, 0.05),
    ("correct: 5% above, 3% noise + 2% outliers", 1.1025, 1.05, 0.03, 0.02),
    ("5% slowdown of a 1.107x variant vs 1.08, 3% noise", 1.107 / 1.05, 1.08, 0.03, 0.02),
    ("5% slowdown of a 1.107x variant vs 1.08, 0.5% noise", 1.107 / 1.05, 1.08, 0.005, 0.0),
    ("round trip 1.003x vs 1.05, 3% noise", 1.003, 1.05, 0.03, 0.02),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rules = [("Bonferroni over 8 looks (shipped)", StoppingRule()),
             ("uncorrected 95% at every look", StoppingRule(confidence=0.6))]
    print(f"{args.trials} trials per row, seed {args.seed}; max_time_s 5, 1 ms per sample")
    print("| scenario | rule | pass | fail | undecided | mean pairs |")
    print("|---|---|---|---|---|---|")
    for label, true, threshold, noise, tail in SCENARIOS:
        for name, rule in rules:
            if name.startswith("uncorrected") and true != threshold:
                continue
            sim = simulate(true, threshold, noise=noise, trials=args.trials, rule=rule,
                           seed=args.seed, heavy_tail=tail)
            print(f"| {label} | {name} | {sim.passed / sim.trials:.1%} | "
                  f"{sim.failed / sim.trials:.1%} | {sim.undecided / sim.trials:.1%} | "
                  f"{sim.mean_pairs:.0f} |", flush=True)


if __name__ == "__main__":
    main()
