"""Two builds of one `model_tuning.py` run compared round by round: the ratio of their speeds.

Reads the ``<model>-readings.csv`` a run writes (every round-robin reading of every system, by
round). Within a round the two builds were read seconds apart, so their ratio cancels most of
the machine's drift between rounds. For each pair ``A/B`` asked for it prints B's seconds ÷
A's per round (above 1: A is faster), their geometric mean with a 95 % bootstrap interval
(`efficiency_goals.geomean_interval`), how many rounds A was ahead in, and the run (the
file's folder).

    python studies/round_ratios.py RUN/resnet18-readings.csv \
        tensortune-channels-last-warm@1000/metaschedule-channels-last@1000

``--pool-with`` other runs' readings files (other seeds of the same arms) adds, per pair, a
line pooled over every file: the geometric mean of the files' own geometric means (each seed
counts once, however many rounds it read), with a 95 % interval from a two-level bootstrap
(files drawn with replacement, then rounds within each file; `pooled_interval`). With three
seeds the interval says more about the seeds' spread than the rounds do.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
from efficiency_goals import BOOTSTRAP_SEED, RESAMPLES, geomean_interval, ratio_cell
from finalists_report import read_rounds, round_ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("readings", help="a <model>-readings.csv of a model_tuning.py run")
    parser.add_argument("pairs", nargs="+", metavar="A/B",
                        help="systems as the file names them, e.g. tensortune@1000/"
                        "pytorch-eager (A's speed ÷ B's)")  # fmt: skip
    parser.add_argument("--pool-with", nargs="+", default=[], metavar="READINGS",
                        help="other runs' readings files (other seeds) to pool with the "
                        "first, each seed counting once (default none)")  # fmt: skip
    args = parser.parse_args()
    files = [args.readings, *args.pool_with]
    runs = []
    for path in files:
        try:
            runs.append(read_rounds(path))
        except (OSError, KeyError, ValueError) as error:
            parser.error(f"{path}: not a readings file ({error})")
    asked = [pair.partition("/") for pair in args.pairs]
    for path, readings in zip(files, runs, strict=True):
        for a, sep, b in asked:
            if not sep or a not in readings or b not in readings:
                parser.error(f"{a}{sep}{b}: pairs are A/B of systems in {path}: "
                             f"{' '.join(sorted(readings))}")  # fmt: skip
    print("| A | B | A's speed ÷ B's [95 %] | rounds A ahead | run |")
    print("|---|---|---|---|---|")
    for a, _, b in asked:
        per_run = []
        for path, readings in zip(files, runs, strict=True):
            ratios = round_ratios(readings, a, b)
            per_run.append([math.log(r) for r in ratios])
            found = geomean_interval(per_run[-1])
            ahead = sum(r > 1 for r in ratios)
            run = os.path.basename(os.path.dirname(os.path.abspath(path)))
            print(f"| {a} | {b} | {ratio_cell(found)} | {ahead} of {len(ratios)} | {run} |")
        if len(runs) > 1:
            ahead = sum(sum(x > 0 for x in logs) for logs in per_run)
            rounds = sum(len(logs) for logs in per_run)
            print(f"| {a} | {b} | {ratio_cell(pooled_interval(per_run))} | {ahead} of "
                  f"{rounds} | pooled over {len(runs)} runs |")  # fmt: skip
    sys.stdout.flush()


def pooled_interval(per_run: list[list[float]]) -> dict[str, float]:
    """The geometric mean over runs of each run's geometric mean, from per-round log ratios
    (each run counts once), with a 95 % two-level bootstrap interval: runs drawn with
    replacement, then rounds within each drawn run (`RESAMPLES` resamples, seeded with
    `BOOTSTRAP_SEED`). A dict as `efficiency_goals.geomean_interval`'s (``pairs``: runs)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    logs = [np.asarray(run, dtype=float) for run in per_run]
    means = np.empty(RESAMPLES)
    for i in range(RESAMPLES):
        drawn = rng.integers(0, len(logs), size=len(logs))
        means[i] = np.mean([logs[j][rng.integers(0, len(logs[j]), len(logs[j]))].mean()
                            for j in drawn])  # fmt: skip
    low, high = np.exp(np.percentile(means, [2.5, 97.5]))
    return {
        "pairs": len(logs),
        "geomean": math.exp(float(np.mean([run.mean() for run in logs]))),
        "low": float(low),
        "high": float(high),
    }


if __name__ == "__main__":
    main()
