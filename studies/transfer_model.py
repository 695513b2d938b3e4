"""How to mix prior studies into the cost model: rank quality on a new workload, offline.

Uses the studies of the sample-efficiency run (``studies/work/sample_efficiency.db``, made by
``sample_efficiency.py``). For each transfer pair, the model is trained on the source
workloads' learned-sampler studies plus the first ``n`` trials of the target's TPE study
(seed 0-2: what a new study has measured so far), and scored on every other config measured
on the target (all tuners but MetaSchedule, whose configs are not in our template): Kendall's
tau and top-10 % recall against their measured GFLOP/s.

Schemes:

- ``local``: the target's own ``n`` rows only (a cold start);
- ``joint-hH``: one model on source and local rows, each workload its own rank query, source
  rows weighted ``0.5 ** (n / H)`` (`tensortune.sampler.source_weighting.source_weight`);
- ``margin``: AutoTVM's: a model fit on the sources gives a base margin, discounted by
  ``0.5 ** (n / 64)``, on which a model of the local rows is boosted.

Writes ``studies/results/transfer_model.csv``.

    python studies/transfer_model.py
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
import optuna
from results_io import write_csv

from tensortune.cost_model import BootstrapXGBModel, kendall_tau, top_k_recall
from tensortune.features import FeatureExtractor
from tensortune.sampler.history import KnobSpace, read_history, training_targets
from tensortune.sampler.source_weighting import source_weight
from tensortune.sampler.transfer import load_sources
from tensortune.storage import study_workload
from tensortune.templates import CpuTemplate
from tensortune.tuning import SAMPLERS

HERE = os.path.dirname(os.path.abspath(__file__))
#: target label → source labels (study labels of the sample-efficiency run).
PAIRS = {
    "resnet18-c7": ("resnet18-c12",),
    "resnet18-c2": ("resnet18-c7", "resnet18-c12"),
    "resnet18-c12": ("resnet18-c2", "resnet18-c7"),
    "bert-attention": ("matmul-1024", "bert-ffn"),
    "mobilenet-dw": ("resnet18-c2", "resnet18-c7", "resnet18-c12"),
}
N_LOCAL = (0, 8, 16, 32)
HALF_LIVES = (8, 32, 128, float("inf"))
SEEDS = (0, 1, 2)


def studies_of(storage: optuna.storages.BaseStorage, label: str, tuner: str) -> list:
    names = [s.study_name for s in storage.get_all_studies()]
    return [
        optuna.load_study(study_name=n, storage=storage)
        for n in names
        if n.startswith(f"{label}/{tuner}/") and n.endswith("/n64")
    ]


def target_rows(storage, label: str):
    """Feature rows and GFLOP/s of every config measured on `label`, by study name."""
    studies = [s for tuner in SAMPLERS for s in studies_of(storage, label, tuner)]
    template = CpuTemplate(study_workload(studies[0]))
    space = KnobSpace(template.knobs)
    extractor = FeatureExtractor(template, "curve")
    out = {}
    for study in studies:
        history = read_history(study, space)
        rows = extractor([space.decode(r) for r in history.configs])
        out[study.study_name] = (history.configs, rows, history.values)
    return out


def fit_margin(sources, X, y, seed):
    """AutoTVM's transfer: a source model's margin, discounted, under a local model."""
    import xgboost

    base = BootstrapXGBModel(n_models=1, seed=seed).fit(
        sources.features, sources.targets, groups=sources.groups
    )
    discount = source_weight(len(y), 64.0)

    def margin(rows):
        return discount * base.members_[0].predict(xgboost.DMatrix(rows), output_margin=True)

    if len(y) < 2 or np.ptp(y) == 0:
        return lambda rows: margin(rows)
    params = BootstrapXGBModel(n_models=1, seed=seed)._xgb_params(seed)
    dtrain = xgboost.DMatrix(X, label=y, base_margin=margin(X))
    dtrain.set_group([len(y)])
    booster = xgboost.train(params, dtrain, num_boost_round=80)
    return lambda rows: booster.predict(xgboost.DMatrix(rows, base_margin=margin(rows)))


def predictor(scheme, sources, X, y, seed):
    if scheme == "local":
        model = BootstrapXGBModel(n_models=3, seed=seed).fit(X, y)
        return lambda rows: model.predict(rows)[0]
    if scheme == "margin":
        return fit_margin(sources, X, y, seed)
    half_life = float(scheme.removeprefix("joint-h"))
    weight = source_weight(len(y), half_life)
    model = BootstrapXGBModel(n_models=3, seed=seed).fit(
        np.vstack([X, sources.features]),
        np.concatenate([y, sources.targets]),
        groups=np.concatenate([np.zeros(len(y), np.int64), sources.groups]),
        sample_weight=np.concatenate([np.ones(len(y)), np.full(len(sources), weight)]),
    )
    return lambda rows: model.predict(rows)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=os.path.join(HERE, "work", "sample_efficiency.db"))
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    storage = optuna.storages.RDBStorage(f"sqlite:///{args.work}")
    schemes = ["local", "margin", *(f"joint-h{h:g}" for h in HALF_LIVES)]
    out = []
    for target, source_labels in PAIRS.items():
        sources = load_sources(
            [s for label in source_labels for s in studies_of(storage, label, "costmodel")],
            "curve",
        )
        measured = target_rows(storage, target)
        for seed in SEEDS:
            local_name = f"{target}/tpe/s{seed}/n64"
            configs, rows, values = measured[local_name]
            held = [v for k, v in measured.items() if k != local_name]
            for n in N_LOCAL:
                seen = {tuple(c) for c in configs[:n]}
                test = [
                    (r, v)
                    for c_all, r_all, v_all in held
                    for c, r, v in zip(c_all, r_all, v_all, strict=True)
                    if tuple(c) not in seen and np.isfinite(v) and not np.isnan(r).any()
                ]
                X_test = np.array([r for r, _ in test])
                y_test = np.array([v for _, v in test])
                X, y = rows[:n], training_targets(values[:n])
                ok = ~np.isnan(X).any(axis=1)
                for scheme in schemes:
                    if scheme == "local" and n < 2:
                        continue
                    scores = predictor(scheme, sources, X[ok], y[ok], seed)(X_test)
                    out.append(
                        {
                            "target": target,
                            "sources": "+".join(source_labels),
                            "seed": seed,
                            "n_local": n,
                            "scheme": scheme,
                            "kendall_tau": round(kendall_tau(scores, y_test), 4),
                            "top10_recall": round(top_k_recall(scores, y_test), 4),
                            "n_test": len(y_test),
                        }
                    )
            print(target, seed, "done", flush=True)
    write_csv(os.path.join(args.out, "transfer_model.csv"), out)
    for target in PAIRS:
        for n in N_LOCAL:
            line = []
            for scheme in schemes:
                taus = [
                    r["kendall_tau"]
                    for r in out
                    if r["target"] == target and r["n_local"] == n and r["scheme"] == scheme
                ]
                if taus:
                    line.append(f"{scheme} {statistics.median(taus):.2f}")
            print(f"{target:15s} n={n:2d}  " + "  ".join(line))


if __name__ == "__main__":
    main()
