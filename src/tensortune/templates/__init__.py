"""Templates: a workload's schedule knobs as an Optuna search space, and knobs → schedule."""

from tensortune.templates.cpu import CpuTemplate, InvalidConfig
from tensortune.templates.cuda import CudaTemplate
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
    "CudaTemplate",
    "InvalidConfig",
    "LocalAccumKnob",
    "ParallelKnob",
    "SplitKnob",
    "UnrollKnob",
]
