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
import json
import os
import statistics
import time

import numpy as np
from results_io import write_csv

import tensortune
from tensortune.cost_model import BootstrapXGBModel, kendall_tau, top_k_recall
from tensortune.features import FEATURE_SETS, FeatureExtractor
from tensortune.sampler.history import training_targets
from tensortune.templates import CpuTemplate

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
DATA = os.path.join(HERE, "..", "tests", "data")
DATASETS = ("conv2d_a", "conv2d_b", "matmul_a")
#: (train on, test on): another shape of the same operator, then another operator.
TRANSFERS = (
    ("conv2d_a", "conv2d_b"),
    ("conv2d_b", "conv2d_a"),
    ("conv2d_a+conv2d_b", "matmul_a"),
    ("matmul_a", "conv2d_a"),
)


def load(name: str, feature_set: str, limit: int | None) -> tuple[np.ndarray, np.ndarray, float]:
    """Feature rows, targets scaled per dataset, and extraction configs/s."""
    with open(os.path.join(DATA, f"{name}.json")) as f:
        data = json.load(f)
    records = data["records"][:limit]
    workload = tensortune.get_workload(data["workload"], **data["shape"])
    extractor = FeatureExtractor(CpuTemplate(workload), feature_set)
    extractor([records[0]["config"]])  # the first call pays one-time setup
    start = time.perf_counter()
    rows = extractor([r["config"] for r in records[1:]])
    rate = (len(records) - 1) / (time.perf_counter() - start)
    rows = np.vstack([extractor([records[0]["config"]]), rows])
    values = np.array([np.nan if r["gflops"] is None else r["gflops"] for r in records])
    return rows, training_targets(values), rate


def half_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of a random half to train on and the other half to test on."""
    order = np.random.default_rng(seed).permutation(n)
    return order[: n // 2], order[n // 2 :]


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
