"""What the learned sampler costs next to the study it drives, as the history grows: a real
study of more than 1000 trials (every config built, checked and timed, as `tensortune tune`
does, no measurement cache) with the default `tensortune.CostModelSampler`, and per window of
64 trials the sampler's own seconds against the window's wall time.

The first window is the overhead of a 64-trial study (vendor baseline included in its wall
time, as in ``sample_efficiency.py``); the last starts with 1000 measured trials of history.
Cheap kernels are the worst case for the share, so the default workloads are the two
reference layers that measure fastest (ResNet-18 C12 and C2).

Writes ``studies/results/sampler_overhead.csv`` (one row per workload and window) and
``sampler_overhead_phases.csv`` (the model rounds of the last window: how many, how many fit
the cost model, and their mean seconds by part).

    python studies/sampler_overhead.py                    # C12 and C2, 1064 trials, seed 0
    python studies/sampler_overhead.py --quick --out /tmp # matmul 64, 96 trials, windows of 32
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import optuna
from common import CONV_LABELS, RESULTS, SETTINGS, TimedSampler, workload_of
from results_io import write_csv

import tensortune
from tensortune.sampler.proposals import ROUND_PHASES
from tensortune.target import target_spec

FULL = ("resnet18-c12", "resnet18-c2")
QUICK = ("matmul-64",)
#: Trials per window; the first window is a 64-trial study, as the goals count it.
WINDOW = 64


def windows(
    trials: list[optuna.trial.FrozenTrial], sampler_s: dict[int, float], start: float, size: int
) -> list[dict]:
    """Per window of `size` trials (by number; where the trials do not divide evenly, a last
    window of the last `size`, so that the history the last one starts from is the study's
    size less `size`): the sampler's seconds, the wall seconds from the end of the trials
    before the window (or `start`, the study's, for the first) to the end of its last, and the
    share. Trials are complete or failed ones, in number order."""

    def end(group: list[optuna.trial.FrozenTrial]) -> float:
        return max(t.datetime_complete.timestamp() for t in group if t.datetime_complete)

    firsts = list(range(0, len(trials) - size + 1, size))
    if firsts and firsts[-1] + size < len(trials):
        firsts.append(len(trials) - size)
    rows = []
    for first in firsts:
        window = trials[first : first + size]
        spent = sum(sampler_s.get(t.number, 0.0) for t in window)
        wall = end(window) - (end(trials[:first]) if first else start)
        rows.append(
            {
                "trials": f"{first + 1}-{first + size}",
                "history_at_start": first,
                "sampler_s": round(spent, 2),
                "wall_s": round(wall, 1),
                "sampler_share": round(spent / wall, 4),
                "failed": sum(t.state != optuna.trial.TrialState.COMPLETE for t in window),
                "best_gflops": round(
                    max((t.value for t in trials[: first + size] if t.value), default=0.0), 1
                ),
            }
        )
    return rows


class RoundLog(TimedSampler):
    """A `TimedSampler` of a `tensortune.CostModelSampler` that also keeps, per model round,
    the trial it was made for and its seconds by part (``last_round_seconds``)."""

    def __init__(self, inner: tensortune.CostModelSampler) -> None:
        super().__init__(inner)
        self.rounds: list[tuple[int, dict[str, float]]] = []

    def sample_relative(self, study, trial, search_space):  # type: ignore[no-untyped-def]
        params = super().sample_relative(study, trial, search_space)
        last = self.inner.last_round_seconds
        if last and (not self.rounds or self.rounds[-1][1] is not last):  # a new round
            self.rounds.append((trial.number, last))
        return params


def phases(rounds: list[tuple[int, dict[str, float]]], first: int) -> dict:
    """The model rounds made for trials from number `first` on: how many, how many fit the
    cost model, and their mean seconds by part (`ROUND_PHASES`; ``fit`` over every round,
    ``fit_each`` over those that fit)."""
    kept = [seconds for number, seconds in rounds if number >= first]
    mean = {k: sum(r.get(k, 0.0) for r in kept) / max(len(kept), 1) for k in ROUND_PHASES}
    fitted = [r["fit"] for r in kept if r.get("fit", 0.0) > 0]
    return {
        "rounds": len(kept),
        "fitted": len(fitted),
        **{k: round(v, 3) for k, v in mean.items()},
        "fit_each": round(sum(fitted) / len(fitted), 3) if fitted else 0.0,
    }


def run(label: str, n_trials: int, window: int, seed: int) -> tuple[list[dict], dict]:
    """Tune `label` for `n_trials` with the default learned sampler; its `windows` rows (with
    the workload's label) and the `phases` of the model rounds of its last window."""
    sampler = tensortune.CostModelSampler(seed=seed)
    timed = RoundLog(sampler)
    storage = f"sqlite:///{tempfile.mkdtemp()}/overhead.db"
    start = time.time()
    study = tensortune.tune(
        workload_of(label),
        target_spec("llvm"),
        settings=SETTINGS,
        n_trials=n_trials,
        storage=storage,
        study_name=f"{label}/overhead/s{seed}",
        sampler=timed,
        show_progress=True,
    )
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    name = CONV_LABELS.get(label, label)
    found = windows(trials, timed.per_trial, start, window)
    rows = [{"workload": name, "seed": seed, **row} for row in found]
    last = found[-1]
    first = int(last["trials"].split("-")[0]) - 1  # trial numbers count from 0
    parts = {"workload": name, "trials": last["trials"], **phases(timed.rounds, first)}
    return rows, parts


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="matmul 64, 96 trials, windows of 32")
    parser.add_argument("--trials", type=int, default=1000 + WINDOW,
                        help=f"trials per study (default {1000 + WINDOW}: a last window of "
                        f"{WINDOW} with 1000 trials of history)")  # fmt: skip
    parser.add_argument("--workloads", nargs="+", choices=FULL + QUICK, default=list(FULL),
                        help=f"default {' '.join(FULL)}")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0)")
    parser.add_argument("--out", default=RESULTS, help=f"results folder (default {RESULTS})")
    args = parser.parse_args()
    if args.quick:
        labels, n_trials, window = QUICK, 96, 32
    else:
        labels, n_trials, window = tuple(args.workloads), args.trials, WINDOW
    if n_trials < window:
        parser.error(f"--trials must be at least one window ({window})")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows, round_parts = [], []
    for label in labels:
        found, last = run(label, n_trials, window, args.seed)
        for row in found:
            print(row, flush=True)
        rows += found
        round_parts.append(last)
    write_csv(os.path.join(args.out, "sampler_overhead.csv"), rows)
    write_csv(os.path.join(args.out, "sampler_overhead_phases.csv"), round_parts)


if __name__ == "__main__":
    main()
