"""The llvm CPU template: multi-level tiling of the main reduction, as an Optuna search space.

Every spatial axis of the operator's main (reduction) block is split into four loops and every
reduction axis into two, MetaSchedule's CPU structure. The knobs then pick the loop order, which
spatial axis runs innermost and is vectorised, how many outer loops are fused and parallelised,
the unroll budget, and where results are accumulated locally. Stages before the main block
(padding) stay separate loop nests, parallel and vectorised: TVM 0.27 turns a padded read
(``if_then_else``) inlined into a loop vectorised along a strided axis into a gather plus a
select, and the kernel's speed collapses. Stages after
it (a fused epilogue such as bias + ReLU) are computed per tile when local accumulation is on.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tensortune.templates.base import KnobTemplate
from tensortune.templates.knobs import (
    ChoiceKnob,
    LocalAccumKnob,
    ParallelKnob,
    SplitKnob,
    UnrollKnob,
)

if TYPE_CHECKING:
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import LoopRV, SBlockRV

    from tensortune.workloads import Workload

SPATIAL_LEVELS = 4
REDUCE_LEVELS = 2

#: Loop structures offered by the ``order`` knob: S<l> is tile level l of every spatial axis,
#: R<l> of every reduction axis. The first is MetaSchedule's SSRSRS.
ORDERS = (
    "S0 S1 R0 S2 R1 S3",
    "S0 S1 S2 R0 R1 S3",
    "S0 S1 R0 R1 S2 S3",
    "S0 R0 S1 S2 R1 S3",
)
UNROLL_STEPS = (0, 16, 64, 512)
ACCUMULATE = ("off", "outer", "inner")


@dataclasses.dataclass(frozen=True)
class Axis:
    name: str
    extent: int
    reduce: bool


@dataclasses.dataclass(frozen=True)
class ProgramShape:
    """What the template needs to know of an unscheduled program."""

    main: str
    axes: tuple[Axis, ...]
    producers: tuple[str, ...]
    consumers: tuple[str, ...]

    @property
    def spatial(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if not a.reduce)

    @property
    def reduction(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if a.reduce)


def analyze(workload: Workload) -> ProgramShape:
    """Find the main block (the last one with a reduction) and the stages around it."""
    from tvm import s_tir

    sch = s_tir.Schedule(workload.prim_func())
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    reducing = [i for i, b in enumerate(blocks) if any(int(v.iter_type) == 2 for v in b.iter_vars)]
    main = reducing[-1] if reducing else len(blocks) - 1
    axes = tuple(
        Axis(v.var.name.removeprefix("v_"), int(v.dom.extent), int(v.iter_type) == 2)
        for v in blocks[main].iter_vars
    )
    return ProgramShape(
        main=blocks[main].name_hint,
        axes=axes,
        producers=tuple(b.name_hint for b in blocks[:main]),
        consumers=tuple(b.name_hint for b in blocks[main + 1 :]),
    )


class CpuTemplate(KnobTemplate):
    """Knobs → schedule for one workload on an llvm target.

    Args:
        workload: The operator at its shape.
        max_innermost: Largest innermost tile factor a split may take. Default 64.
    """

    def __init__(self, workload: Workload, max_innermost: int = 64) -> None:
        self.workload = workload
        self.max_innermost = max_innermost
        self.program = analyze(workload)

    # -- the space ---------------------------------------------------------------------------
    @functools.cached_property
    def splits(self) -> dict[str, SplitKnob]:
        """One split knob per axis longer than 1, keyed by axis name."""
        out = {}
        for axis in self.program.axes:
            if axis.extent > 1:
                levels = REDUCE_LEVELS if axis.reduce else SPATIAL_LEVELS
                out[axis.name] = SplitKnob.over(
                    f"tile_{axis.name}", axis.extent, levels, self.max_innermost
                )
        return out

    @functools.cached_property
    def knobs(self) -> list[ChoiceKnob]:
        """All knobs in the order they are suggested."""
        long_spatial = [a.name for a in self.program.spatial if a.extent > 1]
        knobs: list[ChoiceKnob] = list(self.splits.values())
        if len(long_spatial) > 1:
            knobs.append(ChoiceKnob("inner_axis", tuple(long_spatial)))
        if self.program.reduction:
            knobs.append(ChoiceKnob("order", ORDERS))
        # Fusing n loops for n = 1.. the number of spatial axes longer than one; extent-1 axes
        # sit first in the outer level and are fused along for free.
        knobs.append(ParallelKnob("parallel", tuple(range(1, len(long_spatial) + 1))))
        knobs.append(UnrollKnob("unroll", UNROLL_STEPS))
        if self.program.reduction:
            knobs.append(LocalAccumKnob("accumulate", ACCUMULATE))
        return knobs

    # -- knobs → schedule (`KnobTemplate.apply` calls this) ---------------------------------
    def _schedule(self, sch: Schedule, config: Mapping[str, Any]) -> None:
        program = self.program
        main = sch.get_sblock(program.main)
        tiles = self._tile(sch, main, config)
        inner_axis = config.get("inner_axis")
        unit = [a.name for a in program.spatial if a.extent == 1]
        spatial_names = unit + [a.name for a in program.spatial if a.extent > 1]
        if inner_axis is not None:  # the vectorised axis goes last in every spatial level
            spatial_names.remove(inner_axis)
            spatial_names.append(inner_axis)
        order = (
            config.get("order", ORDERS[0]).split()
            if program.reduction
            else ["S0", "S1", "S2", "S3"]
        )
        groups: dict[str, list[LoopRV]] = {}
        sequence: list[LoopRV] = []
        for token in order:
            names = spatial_names if token[0] == "S" else [a.name for a in program.reduction]
            group = [
                tiles[name][int(token[1])] for name in names if int(token[1]) < len(tiles[name])
            ]
            groups[token] = group
            sequence.extend(group)
        sch.reorder(*sequence)

        consumers = [sch.get_sblock(name) for name in program.consumers]
        accumulate = config.get("accumulate", "off")
        write_back = None
        knobs = {k.name: k for k in self.knobs}
        if accumulate != "off" and groups["S0"]:
            first_reduce = order.index("R0")
            spatial_before = [t for t in order[:first_reduce] if t[0] == "S" and groups[t]]
            anchor = groups["S0"][-1] if accumulate == "outer" else groups[spatial_before[-1]][-1]
            local: LocalAccumKnob = knobs["accumulate"]  # type: ignore[assignment]
            write_back = local.apply(sch, main, consumers[0] if consumers else None, anchor)
            consumers = consumers[1:]

        parallel: ParallelKnob = knobs["parallel"]  # type: ignore[assignment]
        outer = parallel.apply(sch, groups["S0"], config["parallel"] + len(unit))
        unroll: UnrollKnob = knobs["unroll"]  # type: ignore[assignment]
        unroll.apply(sch, outer, config["unroll"])

        # An axis strided in the output, vectorised by hand, becomes gathers and scatters: slow
        # to run and, unrolled on top, minutes for LLVM to compile (a 64^3 matmul vectorised 32
        # wide along i and unrolled 512 steps: over 5 min, against 0.4 s left to LLVM).
        vectorize = self._contiguous(spatial_names[-1])
        if vectorize:
            self._vectorize_innermost(sch, main)
        if program.reduction:
            first_reduce_loop = groups["R0"][0]
            init = sch.decompose_reduction(main, first_reduce_loop)
            if vectorize:
                self._vectorize_innermost(sch, init)
        if write_back is not None and vectorize:
            self._vectorize_innermost(sch, write_back)
        for block in consumers + [sch.get_sblock(name) for name in program.producers]:
            self._parallel_root_stage(sch, block)

    def _tile(
        self, sch: Schedule, main: SBlockRV, config: Mapping[str, Any]
    ) -> dict[str, list[LoopRV]]:
        splits = self.splits
        tiles = {}
        for axis, loop in zip(self.program.axes, sch.get_loops(main), strict=True):
            knob = splits.get(axis.name)
            tiles[axis.name] = knob.apply(sch, loop, config[knob.name]) if knob else [loop]
        return tiles

    def _contiguous(self, axis: str) -> bool:
        """Whether `axis` runs with stride 1 through the output: every spatial axis after it
        has extent 1. The main block's axes are in the order of the output's indices (as a TE
        compute makes them)."""
        names = [a.name for a in self.program.spatial]
        return all(a.extent == 1 for a in self.program.spatial[names.index(axis) + 1 :])

    @staticmethod
    def _vectorize_innermost(sch: Schedule, block: SBlockRV) -> None:
        """Vectorise `block`'s innermost loop, if that loop holds the block alone.

        A block computed at a loop with no loops of its own (a write-back under a tile whose
        inner tiles all have extent one) shares its innermost loop with other blocks: that loop
        is not the block's to vectorise.
        """
        loop = sch.get_loops(block)[-1]
        body = sch.get(loop).body
        holds_only_block = getattr(body, "block", None) is not None and body.block.same_as(
            sch.get(block)
        )
        if holds_only_block and int(sch.get(loop).extent) > 1:
            sch.vectorize(loop)

    @staticmethod
    def _parallel_root_stage(sch: Schedule, block: SBlockRV) -> None:
        """A stage left at the root: outer loops in parallel, innermost vectorised."""
        loops = sch.get_loops(block)
        if len(loops) > 2:
            sch.parallel(sch.fuse(*loops[:2]))
        elif len(loops) == 2:
            sch.parallel(loops[0])
        if int(sch.get(loops[-1]).extent) > 1:
            sch.vectorize(loops[-1])
