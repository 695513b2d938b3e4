"""Knob-level features of the llvm CPU template, computed with NumPy for many configs at once.

The program features (`tensortune.features.encodings`) lower every config through TVM, 5-9 ms
each, which keeps a search round to a few hundred candidates. The CPU template's loop nest is
known from its knob values alone: every axis is split into tiles (`tensortune.templates.cpu`),
the ``order`` and ``inner_axis`` knobs fix the loop sequence, the innermost loop is the one
vectorised, the outer ``parallel`` loops are fused, and ``unroll`` / ``accumulate`` annotate
it. So the same relations the ``curve`` features sample (per buffer, the reuse ratio as a
function of the bytes a loop level touches; the arithmetic intensity against all bytes
touched) follow from the tile extents and each buffer's index coefficients, which are read
once per template from the unscheduled program. No TVM call per config: a batch of 10^4
configs costs a few milliseconds.

The row has the same length for every operator, like ``curve``: curves sampled at fixed byte
sizes, then scalars (`KNOB_SCALARS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tensortune.templates import Template

#: Byte sizes (log2) at which the curves are sampled: 2**4 to 2**30 bytes.
GRID = np.linspace(4.0, 30.0, 14)
#: Buffers described: the written one, then the read ones by size, largest first.
MAX_BUFFERS = 3
#: f32 lanes of the widest vector register assumed (AVX-512); a narrower ISA still prefers
#: multiples of its own width, which divide this one.
LANES = 16
#: Vector registers assumed for the accumulator tile (AVX-512 has 32).
REGISTERS = 32
#: Scalar entries after the curves, in order.
KNOB_SCALARS = (
    "iterations",
    "ops_per_iteration",
    "vector_length",
    "vector_full_lanes",
    "vector_lane_use",
    *(f"inner_stride_{b}" for b in range(MAX_BUFFERS)),
    "parallel_extent",
    "parallel_per_core",
    "parallel_balance",
    "parallel_starved",
    "unroll_budget",
    "unrolled_body",
    "accumulate_off",
    "accumulate_outer",
    "accumulate_inner",
    "local_bytes",
    "register_tile",
    "register_spill",
    "reduce_inner",
    *(f"order_{i}" for i in range(4)),
    *(f"level_S{i}" for i in range(4)),
    "level_R0",
    "level_R1",
)
#: Length of one row.
LENGTH = (2 * MAX_BUFFERS + 1) * len(GRID) + len(KNOB_SCALARS)


class KnobFeatures:
    """Feature rows of `tensortune.templates.CpuTemplate` configs, from knob values alone.

    Args:
        template: A `tensortune.templates.CpuTemplate` (or a subclass); any other template
            raises `ValueError`.
        cores: Cores the parallel loop is spread over. Default None: this machine's
            (`tensortune.target.host_cores`).
    """

    def __init__(self, template: Template, cores: int | None = None) -> None:
        from tensortune.target import host_cores
        from tensortune.templates.cpu import ORDERS, SPATIAL_LEVELS, CpuTemplate

        if not isinstance(template, CpuTemplate):
            raise ValueError("knob features describe the llvm CPU template only")
        program, splits = template.program, template.splits
        self.template = template
        self.length = LENGTH
        self.cores = cores or host_cores()
        knobs = list(template.knobs)
        self._column = {k.name: i for i, k in enumerate(knobs)}
        self._n_knobs = len(knobs)
        self.long = [a for a in program.axes if a.extent > 1]
        # Per long axis: its split's factors per choice, (n_choices, levels).
        self._factors = [
            np.array(
                [splits[a.name].factors(str(v)) for v in splits[a.name].choices], dtype=np.float64
            )
            for a in self.long
        ]
        self._spatial = [a.name for a in program.spatial if a.extent > 1]
        self._orders = list(ORDERS) if program.reduction else [" ".join(f"S{i}" for i in range(4))]
        self._inner: list[str] = (
            [str(v) for v in knobs[self._column["inner_axis"]].choices]
            if "inner_axis" in self._column
            else self._spatial[-1:]
        )
        self._spatial_levels = SPATIAL_LEVELS
        self._parallel_choices = np.array(knobs[self._column["parallel"]].choices)
        self._unroll_choices = np.array(knobs[self._column["unroll"]].choices, dtype=np.float64)
        self._accumulate_choices = (
            [str(v) for v in knobs[self._column["accumulate"]].choices]
            if "accumulate" in self._column
            else ["off"]
        )
        self._buffers, self._ops = _buffer_coefficients(template, [a.name for a in self.long])

    # -- public ------------------------------------------------------------------------------
    def __call__(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Rows of configs given as knob values: a ``(len(configs), LENGTH)`` float32 array."""
        from tensortune.templates.knobs import choice_indices

        return self.from_indices(choice_indices(self.template.knobs, configs))

    def from_indices(self, indices: np.ndarray) -> np.ndarray:
        """Rows of configs given as choice indices ``(n, m)`` in the template's knob order."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1, self._n_knobs)
        out = np.zeros((len(indices), LENGTH), dtype=np.float32)
        order_col = self._column.get("order")
        inner_col = self._column.get("inner_axis")
        orders = indices[:, order_col] if order_col is not None else np.zeros(len(indices), int)
        inners = indices[:, inner_col] if inner_col is not None else np.zeros(len(indices), int)
        # The loop sequence depends only on (order, inner_axis): a few groups, each vectorised.
        for o in np.unique(orders):
            for v in np.unique(inners[orders == o]):
                rows = np.flatnonzero((orders == o) & (inners == v))
                out[rows] = self._group(indices[rows], int(o), int(v))
        return out

    # -- one (order, inner_axis) group -------------------------------------------------------
    def _sequence(self, order: int, inner: int) -> tuple[list[tuple[int, int]], dict[str, int]]:
        """Loops outer to inner as (long axis number, tile level), and where each order token's
        group of loops ends (its last position, -1 if empty)."""
        names = [a.name for a in self.long]
        spatial = [n for n in self._spatial if n != self._inner[inner]] + [self._inner[inner]]
        reduction = [a.name for a in self.long if a.reduce]
        sequence: list[tuple[int, int]] = []
        ends: dict[str, int] = {}
        for token in self._orders[order].split():
            level = int(token[1])
            for name in spatial if token[0] == "S" else reduction:
                sequence.append((names.index(name), level))
            ends[token] = len(sequence) - 1
        return sequence, ends

    def _group(self, idx: np.ndarray, order: int, inner: int) -> np.ndarray:
        n, n_axes = len(idx), len(self.long)
        sequence, ends = self._sequence(order, inner)
        depth = len(sequence)
        factors = [
            self._factors[a][idx[:, self._column[f"tile_{ax.name}"]]]
            for a, ax in enumerate(self.long)
        ]
        extents = np.stack([factors[a][:, lv] for a, lv in sequence], axis=1)  # (n, depth)
        # spans[:, p, a]: extent of axis a covered by one run of the loops from p inwards.
        spans = np.ones((n, depth + 1, n_axes))
        for p in reversed(range(depth)):
            spans[:, p] = spans[:, p + 1]
            spans[:, p, sequence[p][0]] *= extents[:, p]
        iterations = spans.prod(axis=2)  # (n, depth + 1)
        cols = [np.zeros((n, len(GRID)), np.float32) for _ in range(2 * MAX_BUFFERS + 1)]
        total = np.zeros((n, depth + 1))
        prints = []
        relative_depth = (depth - np.arange(depth + 1)) / max(depth, 1)
        for b, (coef, shape, itemsize) in enumerate(self._buffers):
            touched = np.minimum(shape, (spans - 1.0) @ np.abs(coef).T + 1.0).prod(axis=2)
            prints.append(touched * itemsize)
            total += touched * itemsize
            if b < MAX_BUFFERS:
                reuse = np.log2(1.0 + iterations / touched)
                rel_depth = np.broadcast_to(relative_depth, (n, depth + 1))
                at = _grid_levels(np.log2(touched * itemsize))  # both curves share their x
                cols[2 * b] = _take(reuse, at)
                cols[2 * b + 1] = _take(rel_depth, at)
        intensity = np.log2(iterations * self._ops / total)
        cols[2 * MAX_BUFFERS] = _take(intensity, _grid_levels(np.log2(total)))

        vector = extents[:, -1]
        inner_axis = sequence[-1][0]
        strides = [_row_major_stride(coef, shape, inner_axis) for coef, shape, _ in self._buffers]
        strides += [0.0] * (MAX_BUFFERS - len(strides))

        parallel = self._parallel_choices[idx[:, self._column["parallel"]]]
        fused = np.ones(n)
        s0 = [p for p, (a, lv) in enumerate(sequence) if lv == 0 and not self.long[a].reduce]
        for k, p in enumerate(s0):
            fused = np.where(parallel > k, fused * extents[:, p], fused)
        per_core = fused / self.cores
        balance = fused / (np.ceil(per_core) * self.cores)

        unroll = self._unroll_choices[idx[:, self._column["unroll"]]]
        inside = iterations[:, 1:]  # loops below the fused outer loop
        body = np.where(inside <= unroll[:, None], inside, 1.0).max(axis=1)

        accumulate = np.zeros((n, 3))
        local = np.zeros(n)
        if "accumulate" in self._column:
            choice = idx[:, self._column["accumulate"]]
            mode = np.array([["off", "outer", "inner"].index(c) for c in self._accumulate_choices])
            accumulate[np.arange(n), mode[choice]] = 1.0
            tokens = self._orders[order].split()
            before = [t for t in tokens[: tokens.index("R0")] if t[0] == "S" and ends[t] >= 0]
            outer_at = ends["S0"] + 1
            inner_at = ends[before[-1]] + 1 if before else outer_at
            write = prints[0]
            local = np.where(mode[choice] == 1, write[:, outer_at], local)
            local = np.where(mode[choice] == 2, write[:, inner_at], local)
        else:
            accumulate[:, 0] = 1.0

        register = np.ones(n)
        reduce_inner = np.ones(n)
        levels = np.zeros((n, 6))
        for p, (a, lv) in enumerate(sequence):
            if self.long[a].reduce:
                levels[:, 4 + lv] += np.log2(extents[:, p])
                if lv == 1:
                    reduce_inner *= extents[:, p]
            else:
                levels[:, lv] += np.log2(extents[:, p])
                if lv == self._spatial_levels - 1:
                    register *= extents[:, p]
        registers = np.ceil(register / LANES)
        order_hot = np.zeros((n, 4))
        order_hot[:, order] = 1.0
        scalars = [
            np.full(n, np.log2(1.0 + iterations[0, 0])),
            np.full(n, np.log2(1.0 + self._ops)),
            np.log2(vector),
            (vector % LANES == 0).astype(float),
            vector / (LANES * np.ceil(vector / LANES)),
            *(np.full(n, np.log2(1.0 + s)) for s in strides),
            np.log2(fused),
            np.log2(per_core),
            balance,
            (fused < self.cores).astype(float),
            np.log2(1.0 + unroll),
            np.log2(body),
            *accumulate.T,
            np.log2(1.0 + local),
            np.log2(registers),
            (registers > REGISTERS).astype(float),
            np.log2(reduce_inner),
            *order_hot.T,
            *levels.T,
        ]
        return np.hstack([*cols, np.stack(scalars, axis=1)]).astype(np.float32)


def _grid_levels(xs: np.ndarray) -> np.ndarray:
    """Per row and grid point, the column of `xs` (log2 bytes per loop level, column 0 the
    outermost, rising outwards) of the outermost level whose x is at most the grid point, the
    innermost where none is; columns counted inner to outer (see `_take`)."""
    # Columns run outer → inner; flip so that x rises along the axis.
    xs = xs[:, ::-1]
    below = (xs[:, None, :] <= GRID[None, :, None]).sum(axis=2) - 1  # (n, grid)
    return np.clip(below, 0, xs.shape[1] - 1)


def _take(ys: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Per row, y at each of `_grid_levels`' levels: a curve sampled on `GRID`."""
    return np.take_along_axis(ys[:, ::-1], levels, axis=1).astype(np.float32)


def _row_major_stride(coef: np.ndarray, shape: np.ndarray, axis: int) -> float:
    """Elements moved in the row-major buffer per step of `axis`."""
    steps = np.concatenate([np.cumprod(shape[::-1])[::-1][1:], [1.0]])
    return float(abs((coef[:, axis] * steps).sum()))


def _buffer_coefficients(
    template: Template, axes: list[str]
) -> tuple[list[tuple[np.ndarray, np.ndarray, int]], int]:
    """Per buffer of the main store (written first, then read by size, largest first): index
    coefficients per long axis ``(dims, axes)``, shape and item size; and the store's
    arithmetic operations per iteration. Read once from the unscheduled program."""
    import tvm

    from tensortune.features.loops import loop_program

    main = loop_program(tvm.IRModule({"main": template.workload.prim_func()})).main_store()
    position = {loop.name: i for i, loop in enumerate(main.loops)}
    out = []
    for access in main.accesses:
        coef = np.zeros((len(access.shape), len(axes)))
        for a, name in enumerate(axes):
            if name in position:
                coef[:, a] = [row[position[name]] for row in access.coefficients]
        out.append((coef, np.array(access.shape, dtype=np.float64), access.itemsize, access))
    writes = [b for b in out if b[3].write]
    reads = sorted(
        (b for b in out if not b[3].write),
        key=lambda b: (-math.prod(b[3].shape) * b[2], b[3].buffer),
    )
    return [(c, s, i) for c, s, i, _ in writes + reads], main.ops
