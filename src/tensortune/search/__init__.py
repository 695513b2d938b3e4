"""Model-guided search over a discrete knob space: annealing, evolution and batch selection."""

from __future__ import annotations

from tensortune.search.annealing import (
    AnnealResult,
    anneal,
    mutate,
    random_configs,
    unseen_random_configs,
)
from tensortune.search.evolution import (
    EvolveResult,
    evolve,
    far_from,
    mutate_many,
    space_filling,
)
from tensortune.search.selection import diverse_greedy, with_random_share

__all__ = [
    "AnnealResult",
    "EvolveResult",
    "anneal",
    "diverse_greedy",
    "evolve",
    "far_from",
    "mutate",
    "mutate_many",
    "random_configs",
    "space_filling",
    "unseen_random_configs",
    "with_random_share",
]
