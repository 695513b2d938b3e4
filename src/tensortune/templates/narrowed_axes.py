"""Tile axes of MetaSchedule's design spaces whose splits are narrowed, and to what.

MetaSchedule's multi-level tiling splits every spatial axis of a reduction into levels around
the reduction loops ("SSRSRS" on CPUs). Two kinds of axis are better split at some levels
only, which `tensortune.templates.metaschedule` applies to the tile knobs it makes:

- A batch axis (the 36 products of a Winograd convolution, attention's heads) reuses no
  operand from one index to the next: tiled inside the reduction loops it only adds
  accumulators that each load their own data. Its inner levels stay at 1.
- On CPUs, an axis that does not index a large weight (the rows of a dense layer's input):
  split outside the reduction loops, it makes the kernel read the whole weight again for each
  outer block of rows. Timed alone, the weight stays in the caches and that costs little; in
  a model, after the other kernels, it comes from memory each time. Its outer levels stay at
  1, so that each part of the weight is read once a call.

A narrowed knob has a name of its own (the loop's, plus a suffix): a study tuned before the
narrowing holds every split under the plain name, and Optuna refuses one name with two
choice sets.
"""

from __future__ import annotations

import math
from typing import Any

#: The innermost tile levels of MetaSchedule's multi-level tiling, those inside the reduction
#: loops ("SSRSRS" on CPUs, "SSSRRSRS" on GPUs): the register tile.
INNER_LEVELS = 2
#: Appended to the name of a tile knob of a batch axis (`is_batch_axis`), whose splits keep
#: the axis out of the `INNER_LEVELS` (since 2026-12-06).
BATCH_SUFFIX = ":batch"
#: Appended to the name of a tile knob of an axis that does not index a large weight
#: (`is_weight_free_axis`), whose splits keep it inside the reduction loops, in the
#: `INNER_LEVELS` (since 2026-12-08).
STREAM_SUFFIX = ":stream"
#: Weights (layout-free buffers of the task: packed, `tensortune.templates.weight_packing`)
#: at least this large are streamed: larger than a server core's L2 (1-2 MiB), so that in a
#: model, after the other kernels, they come from memory.
STREAMED_WEIGHT_BYTES = 2 << 20
#: Suffixes of narrowed tile knobs.
NARROWED_SUFFIXES = (BATCH_SUFFIX, STREAM_SUFFIX)


def plain_name(knob: str) -> str:
    """A tile knob's name without its narrowing suffix (`NARROWED_SUFFIXES`)."""
    for suffix in NARROWED_SUFFIXES:
        knob = knob.removesuffix(suffix)
    return knob


def narrow(
    loop: Any, mod: Any, name: str, splits: list[tuple[int, ...]], streamed: bool
) -> tuple[str, list[tuple[int, ...]]]:
    """The knob name and splits of tile decision `name` over `splits` (outer to inner) of
    `loop` (not yet split) in TIR module `mod`, narrowed where its axis asks: a batch axis's,
    and with `streamed` (the CPU rules) a weight-free axis's."""
    if not splits or len(splits[0]) <= INNER_LEVELS:
        return name, splits
    if is_batch_axis(loop):
        return name + BATCH_SUFFIX, [s for s in splits if set(s[-INNER_LEVELS:]) == {1}]
    if streamed and is_weight_free_axis(loop, mod):
        return name + STREAM_SUFFIX, [s for s in splits if set(s[:-INNER_LEVELS]) == {1}]
    return name, splits


def is_batch_axis(loop: Any) -> bool:
    """Whether `loop` (not yet split) runs a batch axis of the reduction block below it: one
    that indexes every buffer the block reads and writes, and is not the innermost axis of
    what it writes. Such an axis reuses no operand, so tiling it inside the reduction loops
    adds accumulators without sharing a load (the 36 products of a Winograd convolution, the
    heads of attention); where it is the innermost axis (a depthwise convolution's channels
    in NHWC), it is the vector lanes."""
    found = _axis_of(loop)
    if found is None:
        return False
    block, var = found[0], found[1].var
    regions = [*block.reads, *block.writes]
    if not all(any(_indexed_by(r, var)) for r in regions):
        return False
    return not any(_indexed_by(w, var)[-1] for w in block.writes)


def is_weight_free_axis(loop: Any, mod: Any) -> bool:
    """Whether `loop` (not yet split) runs a spatial axis of the reduction block below it that
    does not index a weight the block reads: a layout-free buffer of ``main`` in TIR module
    `mod` (the task's weights, marked where they are packed) of at least
    `STREAMED_WEIGHT_BYTES`."""
    from tvm.tirx import IterVar

    func = mod["main"]
    free = func.attrs.get("layout_free_buffers") if func.attrs else None
    weights = [func.params[int(i)] for i in free or ()]
    weights = [w for w in weights if _size(w) >= STREAMED_WEIGHT_BYTES]
    found = _axis_of(loop) if weights else None
    if found is None:
        return False
    block, axis = found
    if axis.iter_type != IterVar.DataPar:
        return False
    reads = [r for r in block.reads if any(r.source.same_as(w) for w in weights)]
    return any(not any(_indexed_by(r, axis.var)) for r in reads)


def _axis_of(loop: Any) -> tuple[Any, Any] | None:
    """The reduction block below `loop` and its one iteration variable (an ``IterVar``) bound
    to the loop's, or None where there is no such block or the loop binds none or several."""
    from tvm.s_tir.stmt import SBlockRealize
    from tvm.tirx import For, IterVar

    body = loop.body
    while isinstance(body, For):
        body = body.body
    if not isinstance(body, SBlockRealize):
        return None
    block = body.block
    if not any(iv.iter_type == IterVar.CommReduce for iv in block.iter_vars):
        return None
    bound = [
        iv
        for iv, value in zip(block.iter_vars, body.iter_values, strict=True)
        if value.same_as(loop.loop_var)
    ]
    return (block, bound[0]) if len(bound) == 1 else None


def _size(buffer: Any) -> int:
    """Bytes of `buffer`."""
    return math.prod(int(d) for d in buffer.shape) * buffer.dtype.bits // 8


def _indexed_by(region: Any, var: Any) -> list[bool]:
    """Per dimension of buffer region `region`, whether `var` indexes it."""
    from tvm.tirx.analysis import undefined_vars

    return [any(v.same_as(var) for v in undefined_vars(r.min)) for r in region.region]
