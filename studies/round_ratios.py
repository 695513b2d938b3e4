"""Two builds of one `model_tuning.py` run compared round by round: the ratio of their speeds.

Reads the ``<model>-readings.csv`` a run writes (every round-robin reading of every system, by
round). Within a round the two builds were read seconds apart, so their ratio cancels most of
the machine's drift between rounds. For each pair ``A/B`` asked for it prints B's seconds ÷
A's per round (above 1: A is faster), their geometric mean with a 95 % bootstrap interval
(`efficiency_goals.geomean_interval`) and how many rounds A was ahead in.

    python studies/round_ratios.py RUN/resnet18-readings.csv \
        tensortune-channels-last-warm@1000/metaschedule-channels-last@1000
"""

from __future__ import annotations

import argparse
import math
import sys

from efficiency_goals import geomean_interval, ratio_cell
from finalists_report import read_rounds, round_ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("readings", help="a <model>-readings.csv of a model_tuning.py run")
    parser.add_argument("pairs", nargs="+", metavar="A/B",
                        help="systems as the file names them, e.g. tensortune@1000/"
                        "pytorch-eager (A's speed ÷ B's)")  # fmt: skip
    args = parser.parse_args()
    try:
        readings = read_rounds(args.readings)
    except (OSError, KeyError, ValueError) as error:
        parser.error(f"{args.readings}: not a readings file ({error})")
    asked = [pair.partition("/") for pair in args.pairs]
    for a, sep, b in asked:
        if not sep or a not in readings or b not in readings:
            parser.error(
                f"{a}{sep}{b}: pairs are A/B of systems in the file: {' '.join(sorted(readings))}"
            )
    print("| A | B | A's speed ÷ B's [95 %] | rounds A ahead |")
    print("|---|---|---|---|")
    for a, _, b in asked:
        ratios = round_ratios(readings, a, b)
        found = geomean_interval([math.log(r) for r in ratios])
        ahead = sum(r > 1 for r in ratios)
        print(f"| {a} | {b} | {ratio_cell(found)} | {ahead} of {len(ratios)} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
