"""Knobs: one schedule decision each, with its Optuna distribution and the primitives that apply it.

A knob's values are what optuna-dashboard shows, so they are readable: a split is ``"8x4x2x16"``
(outer to inner factors), an order is ``"S0 S1 R0 S2 R1 S3"``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import CategoricalChoiceType, CategoricalDistribution

if TYPE_CHECKING:
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import LoopRV, SBlockRV


def divisors(n: int) -> list[int]:
    """All positive divisors of `n`, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def factorizations(extent: int, levels: int, max_innermost: int) -> list[tuple[int, ...]]:
    """Ordered ways to write `extent` as a product of `levels` factors, the innermost at most
    `max_innermost`."""
    if levels == 1:
        return [(extent,)] if extent <= max_innermost else []
    out = []
    for outer in divisors(extent):
        for rest in factorizations(extent // outer, levels - 1, max_innermost):
            out.append((outer, *rest))
    return out


def choice_indices(knobs: Sequence[ChoiceKnob], configs: Sequence[Any]) -> Any:
    """Configs (mappings of knob name → value) as an ``(n, len(knobs))`` int64 NumPy array of
    each value's position among its knob's choices."""
    import numpy as np

    positions = [{v: i for i, v in enumerate(k.choices)} for k in knobs]
    return np.array(
        [[where[c[k.name]] for where, k in zip(positions, knobs, strict=True)] for c in configs],
        dtype=np.int64,
    ).reshape(len(configs), len(knobs))


@dataclasses.dataclass(frozen=True)
class ChoiceKnob:
    """A categorical decision among readable values."""

    name: str
    choices: tuple[CategoricalChoiceType, ...]

    @property
    def distribution(self) -> CategoricalDistribution:
        return CategoricalDistribution(self.choices)

    def suggest(self, trial: optuna.Trial) -> Any:
        return trial.suggest_categorical(self.name, self.choices)

    def check(self, value: object) -> None:
        """Raise `ValueError` if `value` is not one of the choices."""
        if value not in self.choices:
            shown = ", ".join(map(repr, self.choices[:8]))
            more = f" ... ({len(self.choices)} in all)" if len(self.choices) > 8 else ""
            raise ValueError(f"knob {self.name}={value!r} is outside its space: {shown}{more}")


@dataclasses.dataclass(frozen=True)
class SplitKnob(ChoiceKnob):
    """Tile one loop into ``len(factors)`` nested loops; factors are divisors of its extent."""

    extent: int = 1

    @classmethod
    def over(cls, name: str, extent: int, levels: int, max_innermost: int = 64) -> SplitKnob:
        """All splits of `extent` into `levels` loops with the innermost at most `max_innermost`
        (default 64, MetaSchedule's bound on CPU: longer inner loops only bloat unrolled code)."""
        splits = factorizations(extent, levels, max(1, max_innermost))
        return cls(name, tuple("x".join(map(str, s)) for s in splits), extent)

    @staticmethod
    def factors(value: str) -> list[int]:
        return [int(f) for f in value.split("x")]

    def apply(self, sch: Schedule, loop: LoopRV, value: str) -> list[LoopRV]:
        return list(sch.split(loop, factors=self.factors(value)))


@dataclasses.dataclass(frozen=True)
class ParallelKnob(ChoiceKnob):
    """How many outer loops to fuse into one parallel loop."""

    def apply(self, sch: Schedule, outer_loops: Sequence[LoopRV], value: int) -> LoopRV:
        fused = sch.fuse(*outer_loops[:value]) if value > 1 else outer_loops[0]
        sch.parallel(fused)
        return fused


@dataclasses.dataclass(frozen=True)
class UnrollKnob(ChoiceKnob):
    """LLVM auto-unroll budget (``pragma_auto_unroll_max_step``) for the loops below a loop."""

    def apply(self, sch: Schedule, loop: LoopRV, value: int) -> None:
        if value > 0:
            sch.annotate(loop, "pragma_auto_unroll_max_step", value)
            # Without explicit unrolling the LLVM backend ignores the hint.
            sch.annotate(loop, "pragma_unroll_explicit", 1)


@dataclasses.dataclass(frozen=True)
class LocalAccumKnob(ChoiceKnob):
    """Where results are accumulated before being written out: ``off`` writes straight to the
    output; ``outer`` / ``inner`` accumulate in a tile-sized buffer written back after the
    outermost / innermost spatial tile loop that encloses the reduction."""

    def apply(
        self, sch: Schedule, block: SBlockRV, consumer: SBlockRV | None, loop: LoopRV
    ) -> SBlockRV:
        """Accumulate `block` locally and write back under `loop`; returns the write-back block.

        An elementwise `consumer` (a fused epilogue) already reads the result from an
        intermediate buffer, so it becomes the write-back itself; otherwise `cache_write`
        makes one.
        """
        write_back = consumer if consumer is not None else sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(write_back, loop)
        return write_back
