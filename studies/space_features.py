"""Program features against decision features in MetaSchedule's design space (issue 21).

Reads the finished studies of our sampler in the ``metaschedule`` space (``costmodel-ms``
studies of ``sample_efficiency.py``), and for each workload compares how well an XGBoost
model ranks held-out configs from ``curve`` rows (every config lowered through TVM) and from
``knob`` rows (`tensortune.features.decisions`: the decisions alone, NumPy only), and what a
row costs. Two splits: 5 random halves, and the study's first half → its second half (what a
search round does: rank configs it has not measured from the ones it has).

Writes ``space_features.csv`` in ``--out``: per workload, feature set and split, the median
Kendall tau and top-10 % recall, and configs/s of extraction.

    python studies/space_features.py --storage sqlite:///studies/work/sample_efficiency.db
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import optuna
from common import HERE, RESULTS, half_split
from results_io import write_csv

from tensortune.cost_model import BootstrapXGBModel, kendall_tau, top_k_recall
from tensortune.features import FeatureExtractor
from tensortune.sampler.history import training_targets
from tensortune.storage import study_space, study_target, study_workload
from tensortune.templates import template_for

FEATURES = ("curve", "knob")
DEFAULT_STORAGE = f"sqlite:///{os.path.join(HERE, 'work', 'sample_efficiency.db')}"


def studies_in_space(storage: str, tuner: str) -> list[optuna.Study]:
    """The finished studies of `tuner` in the metaschedule space, one per workload (the first
    seed found)."""
    found: dict[str, optuna.Study] = {}
    for summary in optuna.get_all_study_summaries(storage):
        label, name, *_ = [*summary.study_name.split("/"), "", ""]
        if name != tuner or label in found:
            continue
        found[label] = optuna.load_study(study_name=summary.study_name, storage=storage)
    return [found[k] for k in sorted(found)]


def dataset(study: optuna.Study, feature_set: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Rows of the study's completed configs in trial order, their targets, and configs/s."""
    template = template_for(study_workload(study), study_target(study), study_space(study))
    trials = [t for t in study.trials if t.value is not None and t.params]
    configs = [t.params for t in trials]
    extractor = FeatureExtractor(template, feature_set)
    extractor(configs[:1])  # the first call pays one-time setup
    extractor = FeatureExtractor(template, feature_set)  # and no cache from it
    start = time.perf_counter()
    X = extractor(configs)
    rate = len(configs) / max(time.perf_counter() - start, 1e-9)
    y = training_targets(np.array([t.value for t in trials], dtype=np.float64))
    keep = ~np.isnan(X).any(axis=1)
    return X[keep], y[keep], rate


def scores(X: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, seed: int):
    model = BootstrapXGBModel(n_models=3, seed=seed).fit(X[train], y[train])
    mean, _ = model.predict(X[test])
    return kendall_tau(mean, y[test]), top_k_recall(mean, y[test], 0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        help="studies to read (default: studies/work/sample_efficiency.db)",
    )
    parser.add_argument(
        "--tuner",
        default="costmodel-ms",
        help="tuner whose studies are read "
        "(default costmodel-ms: its trials carry the configs as params)",
    )
    parser.add_argument("--splits", type=int, default=5, help="random half splits (default 5)")
    parser.add_argument("--out", default=RESULTS, help=f"results folder (default {RESULTS})")
    args = parser.parse_args()
    rows = []
    for study in studies_in_space(args.storage, args.tuner):
        label = study.study_name.split("/")[0]
        for feature_set in FEATURES:
            X, y, rate = dataset(study, feature_set)
            n = len(y)
            halves = [half_split(n, seed) for seed in range(args.splits)]
            splits = {
                "random halves": [scores(X, y, tr, te, s) for s, (tr, te) in enumerate(halves)],
                "first half -> second": [
                    scores(X, y, np.arange(n // 2), np.arange(n // 2, n), s) for s in range(3)
                ],
            }
            for split, found in splits.items():
                row = {
                    "workload": label,
                    "features": feature_set,
                    "split": split,
                    "configs": n,
                    "kendall_tau": round(statistics.median(s[0] for s in found), 3),
                    "top10_recall": round(statistics.median(s[1] for s in found), 3),
                    "configs_per_s": round(rate),
                }
                rows.append(row)
                print(row, flush=True)
    write_csv(os.path.join(args.out, "space_features.csv"), rows)


if __name__ == "__main__":
    main()
