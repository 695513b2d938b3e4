"""Is the warm start's loss on conv2d -> depthwise in the search, or in picking the winner?

For each seed 0-9, the cold and warm 128-trial depthwise studies of ``studies/transfer.py``:
each study's best `COUNT` distinct configs among its first 64 and among all 128 trials
(`tensortune.finalists.finalist_trials` on the truncated history) are built once and timed
in `ROUNDS` rounds, every kernel of every study in each round, the order reversed every other
round (`tensortune.finalists.round_orders`), so that drift hits all alike. Even rounds make
pass A, odd rounds pass B. Per study and checkpoint:

- ``best``: the study's own best (as `transfer.py` re-times it), judged by pass B;
- ``pick``: the fastest finalist by pass A, judged by pass B (a pick judged by its own
  readings is biased upward, as a study's best is).

Prints warm / cold for both (median over seeds, every seed, geometric mean with a 95 %
bootstrap interval) and writes ``finalists_probe.csv`` beside it.

    python finalists_probe.py sqlite:///<work>/transfer.db
"""

import csv
import os
import statistics
import sys

import numpy as np
import optuna

from tensortune.finalists import round_orders
from tensortune.measure import Measurer, MeasureSettings
from tensortune.target import target_spec
from tensortune.templates import CpuTemplate

MODES = {"cold": "mobilenet-dw/cold", "warm": "conv2d-to-depthwise/warm"}
SEEDS = range(10)
CHECKPOINTS = (64, 128)
COUNT = 4
ROUNDS = 6
SETTINGS = MeasureSettings(repeat=5, min_repeat_ms=50)  # studies/common.RETIME
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))  # studies/
from common import workload_of  # noqa: E402


def finalists(trials: list, n: int) -> list:
    """The best `COUNT` distinct configs among the first `n` trials, best first."""
    done = [t for t in trials[:n] if t.state == optuna.trial.TrialState.COMPLETE and t.value]
    ranked = sorted(done, key=lambda t: (-t.value, t.number))
    seen, chosen = set(), []
    for t in ranked:
        key = tuple(sorted(t.params.items()))
        if key not in seen:
            seen.add(key)
            chosen.append(t)
    return chosen[:COUNT]


def bootstrap(ratios: list[float], rng: np.random.Generator) -> tuple[float, float, float]:
    logs = np.log(ratios)
    means = [rng.choice(logs, len(logs)).mean() for _ in range(10000)]
    return float(np.exp(logs.mean())), *np.exp(np.percentile(means, [2.5, 97.5]))


def main(url: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    workload = workload_of("mobilenet-dw")
    sets: dict[tuple, list] = {}  # (mode, seed, n) -> finalist trials
    configs: dict[tuple, int] = {}  # config key -> kernel index
    for mode, prefix in MODES.items():
        for seed in SEEDS:
            study = optuna.load_study(study_name=f"{prefix}/s{seed}/n128", storage=url)
            trials = sorted(study.trials, key=lambda t: t.number)
            for n in CHECKPOINTS:
                sets[mode, seed, n] = finalists(trials, n)
                for t in sets[mode, seed, n]:
                    configs.setdefault(tuple(sorted(t.params.items())), len(configs))
    print(f"{len(configs)} distinct kernels; building", flush=True)
    keys = sorted(configs, key=configs.get)
    readings: list[list[list[float]]] = [[[] for _ in keys] for _ in range(2)]
    with Measurer(CpuTemplate(workload), target_spec("llvm"), SETTINGS) as measurer:
        results = measurer.measure([dict(k) for k in keys])
        for r, order in enumerate(round_orders(len(keys), ROUNDS)):
            if r:
                measurer.time_again([results[i] for i in order])
            for i in order:
                readings[r % 2][i].extend(results[i].costs or [])
            print(f"round {r + 1}/{ROUNDS}", flush=True)
    gflops = [
        [workload.flop_count / statistics.median(c) / 1e9 if c else 0.0 for c in p]
        for p in readings
    ]

    def judged(mode: str, seed: int, n: int) -> tuple[float, float]:
        idx = [configs[tuple(sorted(t.params.items()))] for t in sets[mode, seed, n]]
        pick = max(idx, key=lambda i: gflops[0][i])
        return gflops[1][idx[0]], gflops[1][pick]

    rng = np.random.default_rng(0)
    rows = []
    for n in CHECKPOINTS:
        for what, k in (("best", 0), ("pick", 1)):
            ratios = [judged("warm", s, n)[k] / judged("cold", s, n)[k] for s in SEEDS]
            g, lo, hi = bootstrap(ratios, rng)
            print(
                f"@{n} warm/cold {what}: median {np.median(ratios):.2f}, geomean {g:.2f} "
                f"[{lo:.2f}, {hi:.2f}]; seeds {' '.join(f'{x:.2f}' for x in ratios)}"
            )
        for mode in MODES:
            b = [judged(mode, s, n) for s in SEEDS]
            print(
                f"   {mode}: medians best {np.median([x[0] for x in b]):.1f}, "
                f"pick {np.median([x[1] for x in b]):.1f} GFLOP/s"
            )
            for s, (best, pick) in zip(SEEDS, b, strict=True):
                rows.append([mode, s, n, round(best, 2), round(pick, 2)])
    with open(os.path.join(HERE, "finalists_probe.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "seed", "trials", "best_passB_gflops", "pick_passB_gflops"])
        w.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1])
