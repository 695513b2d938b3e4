"""Each mode against cold and against the default warm start, by the finalists' pick and by
the study's own best, from the kept re-timing of one ``transfer.py --finalists 4`` run.

Prints per checkpoint: mode / cold and mode / warm (geometric mean over seeds with a 95 %
bootstrap interval, and the median), each by the pick (``gflops``) and by the best
(``best_gflops``), both read in the same judging pass.

    python pick_and_best.py sqlite:///<work>/transfer.db PAIR SEEDS MODE ...
    e.g. conv2d-to-depthwise 10 warm warm-explore-local
"""

import math
import os
import statistics
import sys

import optuna

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from efficiency_goals import geomean_interval, ratio_cell
from transfer import PAIRS, RETIMED_ATTR

CHECKPOINTS = ("16", "32", "64", "128")


def main(url: str, pair: str, seeds: int, modes: list[str]) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    target = PAIRS[pair][0]
    kept = [
        optuna.load_study(study_name=f"{target}/cold/s{seed}/n128", storage=url).user_attrs[
            RETIMED_ATTR + pair + ":finalists4"
        ]
        for seed in range(seeds)
    ]
    for mode in modes:
        for base in [b for b in ("cold", "warm") if b != mode]:
            print(f"## {mode} / {base} ({seeds} seed pairs)")
            for n in CHECKPOINTS:
                cells = []
                for key, name in (("gflops", "pick"), ("best_gflops", "best")):
                    ratios = [k[key][mode][n] / k[key][base][n] for k in kept]
                    found = geomean_interval([math.log(r) for r in ratios])
                    median = statistics.median(ratios)
                    cells.append(f"{name} {ratio_cell(found)} (median {median:.2f})")
                print(f"@{n}: " + "; ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
