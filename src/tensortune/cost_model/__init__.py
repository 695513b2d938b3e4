"""Statistical cost models for tensor-program search and the acquisition functions on them."""

from __future__ import annotations

from tensortune.cost_model.acquisition import (
    ACQUISITIONS,
    acquire,
    expected_improvement,
    upper_confidence_bound,
)
from tensortune.cost_model.evaluation import kendall_tau, top_k_recall
from tensortune.cost_model.xgb import BootstrapXGBModel

__all__ = [
    "ACQUISITIONS",
    "BootstrapXGBModel",
    "acquire",
    "expected_improvement",
    "kendall_tau",
    "top_k_recall",
    "upper_confidence_bound",
]
