"""The template interface: what the sampler, the measurer, the features, the objective, the
export and the dashboard ask of a schedule template.

A template turns a config (one value per knob) into a scheduled program of its workload.
`KnobTemplate` implements all of it but `knobs` and the scheduling itself, which
`CpuTemplate` and `CudaTemplate` define; a new template may subclass it or be any class with
these members.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import optuna
    from tvm.s_tir import Schedule

    from tensortune.templates.knobs import ChoiceKnob
    from tensortune.workloads import Workload


class Template(Protocol):
    """Knobs → schedule for one workload.

    A template travels to the build worker processes with cloudpickle, so it holds plain Python
    values, never TVM IR. A template for a GPU may also have a ``target`` (its target dict),
    which per-store features read (`tensortune.features.FeatureExtractor`).

    Attributes:
        workload: The operator at its shape that every config schedules.
    """

    workload: Workload

    @property
    def knobs(self) -> Sequence[ChoiceKnob]:
        """All knobs, in the order they are suggested; it fixes the order of a config's
        values for the sampler and the features."""
        ...

    @property
    def space_size(self) -> int:
        """Number of distinct configs (valid or not)."""
        ...

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """The knobs as Optuna distributions, by name."""
        ...

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask `trial` for a value of every knob; returns the config."""
        ...

    def check(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config restricted to the knobs; `ValueError` if one is missing or outside its
        space."""
        ...

    def apply(self, config: Mapping[str, Any]) -> Schedule:
        """The scheduled program of `config`; `ValueError` for a missing knob or a value outside
        its space, `tensortune.templates.InvalidConfig` (a `ValueError`) for a combination the
        template or TVM refuses."""
        ...
