"""Templates: a workload's schedule knobs as an Optuna search space, and knobs → schedule."""

from tensortune.templates.cpu import CpuTemplate, InvalidConfig
from tensortune.templates.knobs import (
    ChoiceKnob,
    LocalAccumKnob,
    ParallelKnob,
    SplitKnob,
    UnrollKnob,
)

__all__ = [
    "ChoiceKnob",
    "CpuTemplate",
    "InvalidConfig",
    "LocalAccumKnob",
    "ParallelKnob",
    "SplitKnob",
    "UnrollKnob",
]
