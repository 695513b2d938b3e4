"""Templates: a workload's schedule knobs as an Optuna search space, and knobs → schedule."""

from typing import Any

from tensortune.errors import TensortuneError
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
from tensortune.templates.metaschedule import MetaScheduleTemplate
from tensortune.templates.template import Template
from tensortune.workloads import Workload

#: The search spaces a workload can be tuned in, read by the command line and the API alike:
#: ``template``, the hand-written template of the target's kind (`CpuTemplate`,
#: `CudaTemplate`); ``metaschedule``, MetaSchedule's design space of the workload's TIR
#: (`MetaScheduleTemplate`), for any operator.
SPACES = ("template", "metaschedule")


def template_for(workload: Workload, target: dict[str, Any], space: str = SPACES[0]) -> Template:
    """The template of `workload` on `target` in `space` (one of `SPACES`; default
    ``"template"``: `CudaTemplate` for a ``cuda`` target, `CpuTemplate` otherwise);
    `TensortuneError` for another space."""
    if space == "metaschedule":
        return MetaScheduleTemplate(workload, target)
    if space != "template":
        raise TensortuneError(f"unknown search space {space!r}: one of {', '.join(SPACES)}")
    if target.get("kind") == "cuda":
        return CudaTemplate(workload, target)
    return CpuTemplate(workload)


__all__ = [
    "SPACES",
    "ChoiceKnob",
    "CpuTemplate",
    "CudaTemplate",
    "InvalidConfig",
    "KnobTemplate",
    "LocalAccumKnob",
    "MetaScheduleTemplate",
    "ParallelKnob",
    "SplitKnob",
    "Template",
    "UnrollKnob",
    "template_for",
]
