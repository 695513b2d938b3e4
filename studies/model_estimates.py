"""A model's estimate while tuning (its tasks' best kernels, weighed by their calls), read from
the task studies of finished runs, at given trial counts and at given seconds of tuning: how
two arms of `model_tuning.py` compare at equal trials and at equal wall time.

    python studies/model_estimates.py --model resnet18 \
        --storages plain=sqlite:///work/resnet18.db warm=sqlite:///work/resnet18-warm.db \
        --trials 128 256 500 --seconds 300 600 900

Seconds count from the start of the run's first trial to the end of each trial (task
extraction and the first build before it are left out, so they read a little below
`model_tuning.py`'s tuning seconds). Nothing is measured: the estimate is the tuning-time
one, biased upward as every best-while-tuning figure is; the timed builds are in
`model_tuning.py`'s results.
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import model_zoo
import optuna

from tensortune.model import from_torch
from tensortune.model.tasks import NO_REWRITES
from tensortune.model.tuning import model_tuning


def estimate_curve(model: str, storage: str) -> list[tuple[float, float]]:
    """Per finished trial of the model's task studies in `storage`, in the order they ended:
    seconds since the first trial began, and the model's estimate (ms) after it (inf until
    every tuned task has a kernel)."""
    net, example = model_zoo.model(model)
    # The plain arm of model_tuning.py: NCHW, direct and unpacked, as it tunes it.
    program = from_torch(net, example, name=model)
    tuning = model_tuning(program, "llvm", storage, **dataclasses.asdict(NO_REWRITES))
    ended = []
    for index, study in enumerate(tuning.studies):
        if study is None:
            continue
        for trial in study.get_trials(deepcopy=False):
            if trial.datetime_complete is None or trial.datetime_start is None:
                continue
            cost = trial.user_attrs.get("cost_s")
            ok = trial.state == optuna.trial.TrialState.COMPLETE and cost
            ended.append(
                (trial.datetime_start, trial.datetime_complete, index, cost if ok else None)
            )
    start = min(e[0] for e in ended)
    best = {i: math.inf for i, study in enumerate(tuning.studies) if study is not None}
    curve = []
    for _, done, index, cost in sorted(ended, key=lambda e: e[1]):
        if cost is not None:
            best[index] = min(best[index], float(cost))
        ms = 1e3 * sum(tuning.tasks[i].weight * b for i, b in best.items())
        curve.append(((done - start).total_seconds(), ms))
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18", choices=model_zoo.MODELS)
    parser.add_argument("--storages", nargs="+", required=True, metavar="LABEL=URL")
    parser.add_argument("--trials", nargs="*", type=int, default=[128, 256, 500])
    parser.add_argument("--seconds", nargs="*", type=float, default=[])
    args = parser.parse_args()
    heads = [f"@{n} trials" for n in args.trials] + [f"@{s:g} s" for s in args.seconds]
    print("| arm | " + " | ".join(heads) + " | trials | s |")
    print("|---" * (len(args.trials) + len(args.seconds) + 3) + "|")
    for item in args.storages:
        label, url = item.split("=", 1)
        curve = estimate_curve(args.model, url)
        at_trials = [f"{curve[n - 1][1]:.2f}" if n <= len(curve) else "" for n in args.trials]
        at_seconds = [
            f"{min((ms for s, ms in curve if s <= limit), default=math.inf):.2f}"
            for limit in args.seconds
        ]
        cells = at_trials + at_seconds + [str(len(curve)), f"{curve[-1][0]:.0f}"]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
