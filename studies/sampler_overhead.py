"""What the learned sampler costs next to what it saves: with 1000 finished trials in a study,
the time to propose a batch of 64 against the time to build and measure those 64.

The 1000 trials are distinct random configs of the template with random (log-normal) values:
the sampler's work (reading the trials, their features, fitting, annealing, selecting) does
not depend on the values, only on their number. The 64 proposals are then really built and
timed. A proposal round is timed twice: in a fresh process (every feature computed) and once
more after the measurements (features of the history cached, as in a running study).

Writes ``studies/results/sampler_overhead.csv``.

    python studies/sampler_overhead.py
    python studies/sampler_overhead.py --quick --out /tmp
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import optuna
from common import case
from results_io import write_csv

import tensortune
from tensortune.measure import Measurer
from tensortune.sampler import CostModelSampler
from tensortune.storage import create_study, open_storage
from tensortune.target import target_spec
from tensortune.templates import CpuTemplate, InvalidConfig

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
FULL = [case(label) for label in ("matmul-1024", "resnet18-c7")]
QUICK = [case("matmul-64")]


def history(template: CpuTemplate, n: int, seed: int) -> list[optuna.trial.FrozenTrial]:
    rng = np.random.default_rng(seed)
    distributions = template.distributions()
    seen: set[tuple] = set()
    trials = []
    while len(trials) < n:
        config = {k.name: k.choices[rng.integers(len(k.choices))] for k in template.knobs}
        key = tuple(config.values())
        if key in seen:
            continue
        seen.add(key)
        value = float(rng.lognormal(3.0, 1.0))
        trials.append(
            optuna.trial.create_trial(params=config, distributions=distributions, value=value)
        )
    return trials


def propose(study: optuna.Study, template: CpuTemplate, n: int) -> tuple[list, float]:
    start = time.perf_counter()
    trials = [study.ask() for _ in range(n)]
    configs = [template.suggest(t) for t in trials]
    return list(zip(trials, configs, strict=True)), time.perf_counter() - start


def measure_case(label: str, name: str, shape: dict, n_history: int, batch: int) -> dict:
    workload = tensortune.get_workload(name, **shape)
    template = CpuTemplate(workload)
    target = target_spec("llvm")
    storage = open_storage(f"sqlite:///{tempfile.mkdtemp()}/overhead.db")
    sampler = CostModelSampler(batch_size=batch, seed=0)
    study = create_study(storage, label, workload, target, None, sampler)
    study.add_trials(history(template, n_history, seed=0))

    asked, cold = propose(study, template, batch)
    cold_phases = dict(sampler.last_round_seconds)
    start = time.perf_counter()
    with Measurer(template, target) as measurer:
        results = measurer.measure([c for _, c in asked])
    measure_s = time.perf_counter() - start
    for (trial, _), result in zip(asked, results, strict=True):
        value = None if result.error else workload.flop_count / result.cost / 1e9
        study.tell(trial, value, state=None if value else optuna.trial.TrialState.FAIL)
    _, warm = propose(study, template, batch)
    warm_phases = sampler.last_round_seconds
    invalid = sum(1 for _, c in asked if _is_invalid(template, c))
    return {
        "workload": label,
        "history_trials": n_history,
        "batch": batch,
        "propose_cold_s": round(cold, 2),
        "propose_warm_s": round(warm, 2),
        "measure_s": round(measure_s, 1),
        "warm_share_of_measure": round(warm / measure_s, 3),
        "cold_share_of_measure": round(cold / measure_s, 3),
        **{f"cold_{k}_s": round(v, 2) for k, v in cold_phases.items()},
        **{f"warm_{k}_s": round(v, 2) for k, v in warm_phases.items()},
        "failed_of_batch": sum(1 for r in results if r.error) - invalid,
    }


def _is_invalid(template: CpuTemplate, config: dict) -> bool:
    try:
        template.apply(config)
    except InvalidConfig:
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="matmul 64, 100 trials, batch 16")
    parser.add_argument("--out", default=RESULTS, help=f"results folder (default {RESULTS})")
    args = parser.parse_args()
    cases, n_history, batch = (QUICK, 100, 16) if args.quick else (FULL, 1000, 64)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = [measure_case(label, name, shape, n_history, batch) for label, name, shape in cases]
    for row in rows:
        print(row, flush=True)
    write_csv(os.path.join(args.out, "sampler_overhead.csv"), rows)


if __name__ == "__main__":
    main()
