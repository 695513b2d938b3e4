"""Templates: a workload's schedule knobs as an Optuna search space, and knobs → schedule."""

from typing import Any

from tensortune.templates.base import InvalidConfig, KnobTemplate
from tensortune.templates.cpu import CpuTemplate
from tensortune.templates.cuda import CudaTemplate
from tensortune.templates.knobs import (
    ChoiceKnob,
    LocalAccumKnob,
    ParallelKnob,
    SplitKnob,
    UnrollKnob,
)
from tensortune.templates.template import Template
from tensortune.workloads import Workload


def template_for(workload: Workload, target: dict[str, Any]) -> Template:
    """The schedule template of `target`'s kind for `workload`: `CudaTemplate` for ``cuda``,
    `CpuTemplate` otherwise."""
    if target.get("kind") == "cuda":
        return CudaTemplate(workload, target)
    return CpuTemplate(workload)


__all__ = [
    "ChoiceKnob",
    "CpuTemplate",
    "CudaTemplate",
    "InvalidConfig",
    "KnobTemplate",
    "LocalAccumKnob",
    "ParallelKnob",
    "SplitKnob",
    "Template",
    "UnrollKnob",
    "template_for",
]
