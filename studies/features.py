"""The three feature sets compared on recorded measurements (``tests/data``, made with
``studies/record_configs.py``): rank quality within a workload, transfer to another shape and
to another operator, and extraction cost per config.

Writes ``studies/results/features.csv``: per feature set and task, the median over splits of
Kendall's tau and top-10 % recall on held-out configs, and configs/s of extraction.

    python studies/features.py              # 5 random half/half splits per dataset
    python studies/features.py --quick --out /tmp
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
from common import DATASETS, HERE, TRANSFERS, half_split, load
from results_io import write_csv

from tensortune.cost_model import BootstrapXGBModel, kendall_tau, top_k_recall
from tensortune.features import FEATURE_SETS

RESULTS = os.path.join(HERE, "results")


def quality(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, seed: int):
    model = BootstrapXGBModel(n_models=3, seed=seed).fit(X, y)
    mean, _ = model.predict(X_test)
    return kendall_tau(mean, y_test), top_k_recall(mean, y_test, 0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 configs per dataset, 1 split")
    parser.add_argument("--splits", type=int, default=5, help="random splits (default 5)")
    parser.add_argument("--out", default=RESULTS, help=f"results folder (default {RESULTS})")
    args = parser.parse_args()
    limit, splits = (60, 1) if args.quick else (None, args.splits)
    rows = []
    # The loop tree is the TreeGRU's input, compared in cost_models.py.
    for feature_set in [f for f in FEATURE_SETS if f != "loop-tree"]:
        data = {name: load(name, feature_set, limit) for name in DATASETS}
        for name in DATASETS:
            X, y, rate = data[name]
            scores = []
            for seed in range(splits):
                train, test = half_split(len(y), seed)
                scores.append(quality(X[train], y[train], X[test], y[test], seed))
            rows.append(_row(feature_set, f"within {name}", scores, rate))
        for source, target in TRANSFERS:
            parts = [data[s] for s in source.split("+")]
            X = np.vstack([p[0] for p in parts])
            y = np.concatenate([p[1] for p in parts])
            scores = [quality(X, y, data[target][0], data[target][1], seed) for seed in range(3)]
            rows.append(_row(feature_set, f"{source} -> {target}", scores, ""))
        print(*(r for r in rows if r["features"] == feature_set), sep="\n", flush=True)
    write_csv(os.path.join(args.out, "features.csv"), rows)


def _row(feature_set: str, task: str, scores: list, rate: float | str) -> dict:
    return {
        "features": feature_set,
        "task": task,
        "kendall_tau": round(statistics.median(s[0] for s in scores), 3),
        "top10_recall": round(statistics.median(s[1] for s in scores), 3),
        "configs_per_s": round(rate) if rate != "" else "",
    }


if __name__ == "__main__":
    main()
