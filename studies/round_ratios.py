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

A file whose readings came from several fresh processes (its ``timing`` column;
`model_timing.time_in_processes`) gets a line per process and a line pooled over them the same
way (each process counts once), since two processes' timings of the same builds can disagree
beyond either's interval. Pooled over several such files, the bootstrap draws files, then
processes within each, then rounds within each process.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
from efficiency_goals import BOOTSTRAP_SEED, RESAMPLES, geomean_interval, ratio_cell
from finalists_report import read_timings, round_ratios

#: Log ratios by round, or a list of such lists (a file's processes, a pool's files).
Nested = list[Any]


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
            runs.append(read_timings(path))
            if not runs[-1]:
                raise ValueError("no readings")
        except (OSError, KeyError, ValueError) as error:
            parser.error(f"{path}: not a readings file ({error})")
    asked = [pair.partition("/") for pair in args.pairs]
    for path, timings in zip(files, runs, strict=True):
        for a, sep, b in asked:
            if not sep or any(a not in found or b not in found for found in timings):
                parser.error(f"{a}{sep}{b}: pairs are A/B of systems in {path}: "
                             f"{' '.join(sorted(timings[0]))}")  # fmt: skip
    print("| A | B | A's speed ÷ B's [95 %] | rounds A ahead | run |")
    print("|---|---|---|---|---|")
    for a, _, b in asked:
        per_file: list[Nested] = []
        for path, timings in zip(files, runs, strict=True):
            run = os.path.basename(os.path.dirname(os.path.abspath(path)))
            per_timing: list[Nested] = []
            for index, readings in enumerate(timings):
                logs = [math.log(r) for r in round_ratios(readings, a, b)]
                per_timing.append(logs)
                where = f"{run}, process {index + 1}" if len(timings) > 1 else run
                print(f"| {a} | {b} | {ratio_cell(geomean_interval(logs))} | "
                      f"{ahead_cell([logs])} | {where} |")  # fmt: skip
            if len(timings) > 1:
                print(f"| {a} | {b} | {ratio_cell(pooled_interval(per_timing))} | "
                      f"{ahead_cell(per_timing)} | {run}, pooled over {len(timings)} "
                      "processes |")  # fmt: skip
            per_file.append(per_timing)  # one process: a level of one, never drawn
        if len(runs) > 1:
            print(f"| {a} | {b} | {ratio_cell(pooled_interval(per_file))} | "
                  f"{ahead_cell(per_file)} | pooled over {len(runs)} runs |")  # fmt: skip
    sys.stdout.flush()


def ahead_cell(logs: Nested) -> str:
    """'K of N': the rounds, at any depth of `logs`, whose log ratio is above 0."""
    flat = list(_leaves(logs))
    return f"{sum(x > 0 for x in flat)} of {len(flat)}"


def _leaves(logs: Nested) -> Iterator[float]:
    for item in logs:
        if isinstance(item, list):
            yield from _leaves(item)
        else:
            yield item


def pooled_interval(per_run: list[Nested]) -> dict[str, float]:
    """The geometric mean over runs of each run's geometric mean, from per-round log ratios
    (each run counts once; a run that is itself a list of processes' rounds is the mean of
    theirs, each process counting once), with a 95 % bootstrap interval that draws at every
    level with replacement: runs, then processes within a run, then rounds (`RESAMPLES`
    resamples, seeded with `BOOTSTRAP_SEED`; a level of one item is not drawn). A dict as
    `efficiency_goals.geomean_interval`'s (``pairs``: runs)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    tree = [_as_arrays(run) for run in per_run]
    means = np.array([_drawn_mean(tree, rng) for _ in range(RESAMPLES)])
    low, high = np.exp(np.percentile(means, [2.5, 97.5]))
    return {
        "pairs": len(tree),
        "geomean": math.exp(_mean(tree)),
        "low": float(low),
        "high": float(high),
    }


def _as_arrays(node: Nested) -> np.ndarray | list:
    if node and isinstance(node[0], list):
        return [_as_arrays(child) for child in node]
    return np.asarray(node, dtype=float)


def _mean(node: np.ndarray | list) -> float:
    if isinstance(node, np.ndarray):
        return float(node.mean())
    return float(np.mean([_mean(child) for child in node]))


def _drawn_mean(node: np.ndarray | list, rng: np.random.Generator) -> float:
    """One bootstrap draw of `_mean`: every level drawn with replacement, where it has more
    than one item."""
    if isinstance(node, np.ndarray):
        return float(node[rng.integers(0, len(node), len(node))].mean())
    if len(node) == 1:
        return _drawn_mean(node[0], rng)
    drawn = rng.integers(0, len(node), size=len(node))
    return float(np.mean([_drawn_mean(node[j], rng) for j in drawn]))


if __name__ == "__main__":
    main()
