"""Single-operator finalists: does the fastest of a study's best few configs, timed again side
by side, run faster later than the study's best?

For every tensortune study in ``--storage`` (only those whose name contains ``--match``, if
given): its best ``--count`` distinct configs (`tensortune.finalists.finalist_trials`) are
timed in two passes, pass A over every study, then pass B over every study, minutes apart.
Each pass builds the finalists afresh and times them ``--rounds`` times in turns
(`tensortune.finalists.time_finalists`), as an export with finalists would. The pick of one
pass is judged by the other pass's readings only, because the fastest of a pass's own readings
is biased upward just as a study's best is:

    gain A→B = B(study's best) ÷ B(pick of A)      (seconds; above 1: the pick runs faster)

and the same with the passes swapped. A study's figure is the geometric mean of the two; the
pooled figure is their geometric mean over studies, with a 95 % bootstrap interval
(`efficiency_goals.geomean_interval`). Beside it, the in-pass figure A(best) ÷ A(pick of A)
shows the size of that bias. Writes ``finalists.csv`` (per study and pass: every finalist's
trial, tuning-time GFLOP/s and re-timed seconds) and ``finalists_summary.md`` under ``--out``.

    python studies/finalists_operators.py --storage sqlite:////work/run/transfer.db \\
        --match /n128 --out studies/results/finalists-operators
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time

import optuna
from efficiency_goals import geomean_interval, ratio_cell

from tensortune.finalists import (
    FINALISTS,
    ROUNDS,
    finalist_trials,
    retiming_settings,
    time_finalists,
)
from tensortune.measure import Measurer
from tensortune.storage import study_space, study_target, study_workload
from tensortune.templates import template_for

PASSES = ("A", "B")


def load_studies(storage: str, match: str | None) -> list[optuna.Study]:
    """The studies of `storage` made by tensortune (they record their workload), whose name
    contains `match` (None: every one), by name."""
    names = sorted(
        s.study_name
        for s in optuna.get_all_study_summaries(storage)
        if "workload_name" in s.user_attrs and (match is None or match in s.study_name)
    )
    return [optuna.load_study(study_name=name, storage=storage) for name in names]


def time_pass(
    studies: list[optuna.Study], tops: list[list], rounds: int, label: str
) -> list[dict[int, float]]:
    """One pass: per study, the re-timed median seconds of each of its finalists `tops` by
    trial number (``nan`` for one that failed now; empty when none ran)."""
    target = study_target(studies[0])
    templates = [template_for(study_workload(s), study_target(s), study_space(s)) for s in studies]
    settings = retiming_settings(t for top in tops for t in top)
    found: list[dict[int, float]] = []
    with Measurer(templates[0], target, settings) as measurer:
        for index, (study, template, top) in enumerate(
            zip(studies, templates, tops, strict=True), 1
        ):
            pick = time_finalists(measurer, template, top, rounds)
            found.append(dict(pick.finalists) if pick is not None else {})
            print(f"[pass {label} {index}/{len(studies)}] {study.study_name}", file=sys.stderr)
    return found


def fastest_trial(seconds: dict[int, float]) -> int | None:
    """The trial with the fewest seconds among those that ran."""
    ran = [(s, trial) for trial, s in seconds.items() if not math.isnan(s)]
    return min(ran)[1] if ran else None


def study_gains(best: int, a: dict[int, float], b: dict[int, float]) -> dict[str, float] | None:
    """One study's gains (ratios of seconds, above 1: the pick is faster) given its best
    trial `best` and the two passes' readings: ``cross`` (the geometric mean of A→B and B→A)
    and ``in_pass`` (the same judged by the pass that picked). None when a pass lacks the
    best, a pick, or a reading of the other pass's pick."""
    pick_a, pick_b = fastest_trial(a), fastest_trial(b)
    if pick_a is None or pick_b is None:
        return None
    needed = (a.get(best), b.get(best), b.get(pick_a), a.get(pick_b))
    if any(s is None or math.isnan(s) for s in needed):
        return None
    cross = math.sqrt(b[best] / b[pick_a] * (a[best] / a[pick_b]))
    in_pass = math.sqrt(a[best] / a[pick_a] * (b[best] / b[pick_b]))
    return {"cross": cross, "in_pass": in_pass, "pick_a": pick_a, "pick_b": pick_b}


def write_csv(path: str, studies: list, tops: list, passes: dict[str, list]) -> None:
    """Every finalist of every study, with its tuning-time value and each pass's seconds."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["study", "rank", "trial", "tuning_gflops", "seconds_A", "seconds_B"])
        for i, (study, top) in enumerate(zip(studies, tops, strict=True)):
            for rank, trial in enumerate(top):
                row = [passes[p][i].get(trial.number, math.nan) for p in PASSES]
                out.writerow([study.study_name, rank, trial.number, f"{trial.value:.2f}", *row])


def summary(studies: list, tops: list, passes: dict[str, list], count: int, rounds: int) -> str:
    """Markdown: per study its two picks and gains, then the pooled gains."""
    lines = [
        f"# Single-operator finalists: the fastest of each study's best {count}, "
        f"{rounds} rounds per pass",
        "",
        "| study | best trial | pick A | pick B | gain (cross) | gain (in pass) |",
        "|---|---|---|---|---|---|",
    ]
    cross, in_pass, changed = [], [], 0
    for i, (study, top) in enumerate(zip(studies, tops, strict=True)):
        gains = study_gains(top[0].number, passes["A"][i], passes["B"][i]) if top else None
        if gains is None:
            lines.append(f"| {study.study_name} | – | – | – | – | – |")
            continue
        changed += any(gains[p] != top[0].number for p in ("pick_a", "pick_b"))
        cross.append(math.log(gains["cross"]))
        in_pass.append(math.log(gains["in_pass"]))
        lines.append(
            f"| {study.study_name} | {top[0].number} | {gains['pick_a']} | {gains['pick_b']} "
            f"| {gains['cross']:.3f} | {gains['in_pass']:.3f} |"
        )
    lines += [
        "",
        f"Pooled over {len(cross)} studies (geometric mean [95 % bootstrap]):",
        f"- gain judged by the other pass: **{ratio_cell(geomean_interval(cross))}**",
        f"- gain judged by the pass that picked (biased upward): "
        f"{ratio_cell(geomean_interval(in_pass))}",
        f"- studies where a pass picked another config than the study's best: {changed}",
    ]
    if cross:
        lines.append(f"- median cross gain: {statistics.median(math.exp(g) for g in cross):.3f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--storage", required=True, help="Optuna storage URL of the studies")
    parser.add_argument("--match", default=None, help="only studies whose name contains this")
    parser.add_argument(
        "--count", type=int, default=FINALISTS, help=f"finalists per study (default {FINALISTS})"
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"timings per finalist (default {ROUNDS})"
    )
    parser.add_argument("--out", default=os.path.join("studies", "results", "finalists"))
    args = parser.parse_args()
    if args.count < 2 or args.rounds < 1:
        parser.error("--count must be at least 2 and --rounds at least 1")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = load_studies(args.storage, args.match)
    if not studies:
        parser.error(f"no tensortune study in {args.storage} matches {args.match!r}")
    if len({s.user_attrs["target"] for s in studies}) > 1:
        parser.error("the studies tune for more than one target; --match one of them")
    tops = [finalist_trials(s, args.count) for s in studies]
    started = time.monotonic()
    passes = {p: time_pass(studies, tops, args.rounds, p) for p in PASSES}
    os.makedirs(args.out, exist_ok=True)
    write_csv(os.path.join(args.out, "finalists.csv"), studies, tops, passes)
    text = summary(studies, tops, passes, args.count, args.rounds)
    text += f"\nBoth passes took {time.monotonic() - started:.0f} s.\n"
    with open(os.path.join(args.out, "finalists_summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
