"""Statistical cost models for tensor-program search and the acquisition functions on them."""

from __future__ import annotations

from tensortune.cost_model.acquisition import (
    ACQUISITIONS,
    acquire,
    expected_improvement,
    upper_confidence_bound,
)
from tensortune.cost_model.cost_model import LOSSES, CostModel
from tensortune.cost_model.ensemble import BootstrapEnsemble
from tensortune.cost_model.evaluation import kendall_tau, top_k_recall, top_weighted_tau
from tensortune.cost_model.xgb import BootstrapXGBModel

#: Cost models by name, with the feature set each reads by default; the first is the default.
COST_MODELS = {"xgb": "curve", "treegru": "loop-tree"}
#: The default cost model, the first of `COST_MODELS`.
DEFAULT_COST_MODEL = next(iter(COST_MODELS))


def make_cost_model(name: str, loss: str, n_models: int, seed: int) -> CostModel:
    """A fresh cost model by name (one of `COST_MODELS`): `BootstrapXGBModel` or
    `tensortune.cost_model.treegru.TreeGRUModel` (imported only when asked for: it needs
    PyTorch)."""
    if name == "xgb":
        return BootstrapXGBModel(loss=loss, n_models=n_models, seed=seed)
    if name == "treegru":
        from tensortune.cost_model.treegru import TreeGRUModel

        return TreeGRUModel(loss=loss, n_models=n_models, seed=seed)
    raise ValueError(f"unknown cost model {name!r}; choose one of {', '.join(COST_MODELS)}")


__all__ = [
    "ACQUISITIONS",
    "COST_MODELS",
    "DEFAULT_COST_MODEL",
    "LOSSES",
    "BootstrapEnsemble",
    "BootstrapXGBModel",
    "CostModel",
    "acquire",
    "expected_improvement",
    "kendall_tau",
    "make_cost_model",
    "top_k_recall",
    "top_weighted_tau",
    "upper_confidence_bound",
]
