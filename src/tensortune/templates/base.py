"""What every schedule template shares: its knobs as an Optuna search space, the check of a
config against them, and knobs → schedule around the template's own `_schedule`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import optuna

if TYPE_CHECKING:
    from tvm.s_tir import Schedule

    from tensortune.templates.knobs import ChoiceKnob
    from tensortune.workloads import Workload


class InvalidConfig(ValueError):
    """A knob combination that cannot be scheduled; the trial fails with this reason."""


class KnobTemplate:
    """Base of `CpuTemplate` and `CudaTemplate`, implementing `tensortune.templates.Template`:
    a subclass sets ``workload``, and defines ``knobs`` and ``_schedule(sch, config)``, which
    applies a checked config to a schedule."""

    workload: Workload

    @property
    def knobs(self) -> list[ChoiceKnob]:
        """All knobs in the order they are suggested."""
        raise NotImplementedError

    @property
    def space_size(self) -> int:
        """Number of distinct configs (valid or not)."""
        return math.prod(len(k.choices) for k in self.knobs)

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """The knobs as Optuna distributions, by name."""
        return {k.name: k.distribution for k in self.knobs}

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask `trial` for a value of every knob; returns the config."""
        return {k.name: k.suggest(trial) for k in self.knobs}

    def check(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config restricted to this template's knobs; `ValueError` if one is missing or
        outside its space."""
        out = {}
        for knob in self.knobs:
            if knob.name not in config:
                raise ValueError(f"config has no value for knob {knob.name}")
            knob.check(config[knob.name])
            out[knob.name] = config[knob.name]
        return out

    def apply(self, config: Mapping[str, Any]) -> Schedule:
        """The scheduled program for `config` (keys that are no knob are ignored); `ValueError`
        for a missing knob or a value outside its space, `InvalidConfig` (a `ValueError`) if
        the template or TVM refuses the combination."""
        from tvm import s_tir

        config = self.check(config)
        sch = s_tir.Schedule(self._unscheduled())
        try:
            self._schedule(sch, config)
        except s_tir.ScheduleError as err:
            raise InvalidConfig(str(err).strip().splitlines()[-1]) from err
        return sch

    def _schedule(self, sch: Schedule, config: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _unscheduled(self) -> Any:
        # Built once per process: te.create_prim_func is a third of a schedule's cost.
        func = self.__dict__.get("_func")
        if func is None:
            func = self.__dict__["_func"] = self.workload.prim_func()
        return func

    def __getstate__(self) -> dict[str, Any]:
        # TVM IR is not sent to workers; they rebuild it.
        return {k: v for k, v in self.__dict__.items() if k != "_func"}
