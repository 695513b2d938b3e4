"""The paper's two cost models compared on recorded measurements (``tests/data``): XGBoost on
each engineered feature set against the TreeGRU on the loop tree.

For each model: Kendall's tau and top-10 % recall on held-out configs, within each dataset
(half/half splits) and across shapes and operators (train on one dataset, test on another);
and the seconds it takes to extract, train on and predict 1000 programs. Medians over
``--seeds`` splits or model seeds. Writes ``studies/results/cost_models.csv``.

    python studies/cost_models.py                # seeds 0 1 2
    python studies/cost_models.py --quick --out /tmp
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
from common import DATASETS, TRANSFERS, half_split, load
from results_io import write_csv

from tensortune.cost_model import BootstrapXGBModel, kendall_tau, top_k_recall

HERE = os.path.dirname(os.path.abspath(__file__))
#: Model label → the feature set it reads.
MODELS = {
    "xgb-curve": "curve",
    "xgb-itervar": "itervar",
    "xgb-per-store": "per-store",
    "treegru": "loop-tree",
}


def make_model(label: str, seed: int) -> Any:
    if label == "treegru":
        from tensortune.cost_model.treegru import TreeGRUModel

        return TreeGRUModel(n_models=3, seed=seed)
    return BootstrapXGBModel(n_models=3, seed=seed)


def evaluate(label: str, X, y, X_test, y_test, seed: int) -> dict[str, float]:
    """Quality on the test rows and seconds per 1000 programs to train and to predict."""
    model = make_model(label, seed)
    start = time.perf_counter()
    model.fit(X, y)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    mean, _ = model.predict(X_test)
    predict_s = time.perf_counter() - start
    return {
        "tau": kendall_tau(mean, y_test),
        "recall": top_k_recall(mean, y_test, 0.1),
        "train_ms": 1e6 * train_s / len(y),  # ms per 1000 programs = 1e6 s / n
        "predict_ms": 1e6 * predict_s / len(y_test),
    }


def usable(data: tuple) -> tuple[np.ndarray, np.ndarray, float]:
    X, y, rate = data
    keep = ~np.isnan(X).any(axis=1)
    return X[keep], y[keep], rate


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 configs per dataset, 1 seed")
    parser.add_argument("--seeds", type=int, default=3, help="splits / model seeds (default 3)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder")
    args = parser.parse_args()
    limit, seeds = (60, 1) if args.quick else (None, args.seeds)
    rows = []
    for label, feature_set in MODELS.items():
        data = {name: usable(load(name, feature_set, limit)) for name in DATASETS}
        tasks: list[tuple[str, list[dict]]] = []
        for name in DATASETS:
            X, y, _ = data[name]
            runs = []
            for seed in range(seeds):
                train, test = half_split(len(y), seed)
                runs.append(evaluate(label, X[train], y[train], X[test], y[test], seed))
            tasks.append((f"within {name}", runs))
        for source, target in TRANSFERS:
            parts = [data[s] for s in source.split("+")]
            X = np.vstack([p[0] for p in parts])
            y = np.concatenate([p[1] for p in parts])
            X_test, y_test, _ = data[target]
            runs = [evaluate(label, X, y, X_test, y_test, seed) for seed in range(seeds)]
            tasks.append((f"{source} -> {target}", runs))
        extract_ms = statistics.median(1e3 / d[2] * 1e3 for d in data.values())
        for task, runs in tasks:
            rows.append(
                {
                    "model": label,
                    "features": feature_set,
                    "task": task,
                    "seeds": len(runs),
                    **{
                        key: round(statistics.median(r[key] for r in runs), 3)
                        for key in ("tau", "recall")
                    },
                    "extract_ms_per_1000": round(extract_ms),
                    **{
                        f"{key}_per_1000": round(statistics.median(r[key] for r in runs))
                        for key in ("train_ms", "predict_ms")
                    },
                }
            )
            print(rows[-1], flush=True)
    write_csv(os.path.join(args.out, "cost_models.csv"), rows)


if __name__ == "__main__":
    main()
