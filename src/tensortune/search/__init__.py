"""Model-guided search over a discrete knob space: annealing and batch selection."""

from __future__ import annotations

from tensortune.search.annealing import (
    AnnealResult,
    anneal,
    mutate,
    random_configs,
    unseen_random_configs,
)
from tensortune.search.selection import diverse_greedy, with_random_share

__all__ = [
    "AnnealResult",
    "anneal",
    "diverse_greedy",
    "mutate",
    "random_configs",
    "unseen_random_configs",
    "with_random_share",
]
