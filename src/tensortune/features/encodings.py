"""Fixed-length feature vectors from a `LoopProgram`.

Two encodings of the same per-loop facts (the paper's Section 4, "context relation features"):

* `itervar_features`: the loops of the operator's main store, innermost first, flattened for a
  fixed number of loops. Precise within one template; its meaning shifts when the loop nest does.
* `curve_features`: relations sampled at fixed points, so that the length and the meaning of
  every entry are the same for any operator and loop nest: for each buffer of the main store,
  its reuse ratio and nest position as a function of the bytes it touches (a sweep over cache
  sizes), and the arithmetic intensity as a function of the total bytes touched.

All magnitudes are log2(1 + x), which is what tree models split well on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tensortune.features.loops import Access, Loop, LoopProgram, Store

#: Per-loop entries of `itervar_features` before the per-buffer ones.
LOOP_ENTRIES = (
    "extent",
    "depth",
    "product_above",
    "product_below",
    "parallel",
    "vectorized",
    "unrolled",
    "auto_unrolled",
    "thread",
    "ops_below",
)
#: Per-buffer entries under each loop.
BUFFER_ENTRIES = ("touched_bytes", "stride", "accesses", "reuse")
#: Summary entries per store (the heaviest few stores of the program).
STORE_ENTRIES = ("work", "bytes", "vector_width", "parallel_extent", "loops")
#: GPU launch and memory entries (all zero for a CPU program), last in `curve_features`.
GPU_SCALARS = (
    "threads_per_block",
    "blocks",
    "vthreads",
    "warp_efficiency",
    "shared_bytes",
    "local_bytes",
    "shared_read_share",
    "coalesced_share",
)
#: Scalar entries of `curve_features` after the curves.
CURVE_SCALARS = (
    "work",
    "total_work",
    "main_share",
    "vector_width",
    "parallel_extent",
    "auto_unroll",
    "unrolled_work",
    "other_bytes",
    "other_vectorized",
    "other_parallel",
    "loops",
    *GPU_SCALARS,
)


def log_scale(x: float) -> float:
    """``log2(1 + x)``: how every count, size and stride enters a feature row, so that sizes
    spanning orders of magnitude stay comparable and 0 stays 0."""
    return math.log2(1.0 + x)


def _product(loops: Sequence[Loop]) -> int:
    out = 1
    for loop in loops:
        out *= loop.extent
    return out


def _kind_product(loops: Sequence[Loop], kind: str) -> int:
    return _product([loop for loop in loops if loop.kind == kind])


def _ordered_accesses(store: Store, limit: int) -> list[tuple[Access, list[int]]]:
    """The written buffer, then the read ones by bytes touched, largest first; with their
    footprints per loop level. A fixed role order makes slots comparable across programs."""
    with_prints = [(a, a.footprints(store.loops)) for a in store.accesses]
    writes = [p for p in with_prints if p[0].write]
    reads = sorted(
        (p for p in with_prints if not p[0].write),
        key=lambda p: (-p[1][0] * p[0].itemsize, p[0].buffer),
    )
    return (writes + reads)[:limit]


# -- itervar ---------------------------------------------------------------------------------
def itervar_length(max_loops: int, max_buffers: int, max_stores: int) -> int:
    per_loop = len(LOOP_ENTRIES) + max_buffers * len(BUFFER_ENTRIES)
    return max_loops * per_loop + max_stores * len(STORE_ENTRIES)


def itervar_features(
    program: LoopProgram, max_loops: int = 16, max_buffers: int = 4, max_stores: int = 4
) -> np.ndarray:
    """Per-loop features of the main store for its `max_loops` innermost loops (innermost
    first, absent loops zero), then a summary of the `max_stores` heaviest stores."""
    out = np.zeros(itervar_length(max_loops, max_buffers, max_stores), dtype=np.float32)
    main = program.main_store()
    loops = main.loops
    n = len(loops)
    accesses = _ordered_accesses(main, max_buffers)
    per_loop = len(LOOP_ENTRIES) + max_buffers * len(BUFFER_ENTRIES)
    below = 1  # product of the extents strictly inside the current loop
    for slot, level in enumerate(range(n - 1, max(n - 1 - max_loops, -1), -1)):
        loop = loops[level]
        inside = below * loop.extent
        row = [
            log_scale(loop.extent),
            float(level),
            log_scale(_product(loops[:level])),
            log_scale(below),
            float(loop.kind == "parallel"),
            float(loop.kind == "vectorized"),
            float(loop.kind == "unrolled"),
            float(0 < inside <= loop.auto_unroll),
            float(loop.kind == "thread"),
            log_scale(inside * main.ops),
        ]
        for access, prints in accesses:
            touched = prints[level]
            row += [
                log_scale(touched * access.itemsize),
                log_scale(access.stride(level)),
                log_scale(inside),
                log_scale(inside / touched),
            ]
        start = slot * per_loop
        out[start : start + len(row)] = row
        below = inside
    start = max_loops * per_loop
    heaviest = sorted(program.stores, key=lambda s: -s.executions * s.ops)[:max_stores]
    for i, store in enumerate(heaviest):
        row = [
            log_scale(store.executions * store.ops),
            log_scale(sum(a.footprints(store.loops)[0] * a.itemsize for a in store.accesses)),
            log_scale(_kind_product(store.loops, "vectorized")),
            log_scale(_kind_product(store.loops, "parallel")),
            float(len(store.loops)),
        ]
        offset = start + i * len(STORE_ENTRIES)
        out[offset : offset + len(row)] = row
    return out


# -- curve -----------------------------------------------------------------------------------
def curve_length(n_points: int, max_buffers: int) -> int:
    return (2 * max_buffers + 1) * n_points + max_buffers + len(CURVE_SCALARS)


def _sample_curve(xs: Sequence[float], ys: Sequence[float], grid: np.ndarray) -> np.ndarray:
    """Step-sample y(x) at `grid`: at each point, y at the largest x not above it (xs rise
    from the innermost level outwards); below the smallest x, the innermost value."""
    idx = np.searchsorted(np.asarray(xs), grid, side="right") - 1
    return np.asarray(ys, dtype=np.float32)[np.clip(idx, 0, len(ys) - 1)]


def curve_features(
    program: LoopProgram, n_points: int = 24, max_buffers: int = 3, max_log_bytes: float = 34.0
) -> np.ndarray:
    """Relations of the main store sampled at `n_points` working-set sizes from 1 byte to
    2**`max_log_bytes` bytes (default 16 GiB): per buffer (written first, then read by size),
    log2 reuse ratio and relative nest depth; then log2 arithmetic intensity against the total
    bytes touched; then each buffer's innermost stride and `CURVE_SCALARS`."""
    grid = np.linspace(0.0, max_log_bytes, n_points)
    out = np.zeros(curve_length(n_points, max_buffers), dtype=np.float32)
    main = program.main_store()
    loops = main.loops
    n = len(loops)
    # inside[l]: executions of one run of level l (n: one execution)
    inside = [1] * (n + 1)
    for level in reversed(range(n)):
        inside[level] = inside[level + 1] * loops[level].extent
    levels = list(range(n, -1, -1))  # innermost (a single access) outwards
    accesses = _ordered_accesses(main, max_buffers)
    total_bytes = [0] * (n + 1)
    for b, (access, prints) in enumerate(accesses):
        xs = [math.log2(prints[lv] * access.itemsize) for lv in levels]
        reuse = [log_scale(inside[lv] / prints[lv]) for lv in levels]
        depth = [(n - lv) / max(n, 1) for lv in levels]
        out[2 * b * n_points : (2 * b + 1) * n_points] = _sample_curve(xs, reuse, grid)
        out[(2 * b + 1) * n_points : (2 * b + 2) * n_points] = _sample_curve(xs, depth, grid)
        for lv in range(n + 1):
            total_bytes[lv] += prints[lv] * access.itemsize
    intensity_at = 2 * max_buffers * n_points
    xs = [math.log2(max(total_bytes[lv], 1)) for lv in levels]
    ys = [math.log2(inside[lv] * main.ops / max(total_bytes[lv], 1)) for lv in levels]
    out[intensity_at : intensity_at + n_points] = _sample_curve(xs, ys, grid)
    at = intensity_at + n_points
    for b, (access, _) in enumerate(accesses):
        out[at + b] = log_scale(access.stride(n - 1)) if n else 0.0
    at += max_buffers
    others = [s for s in program.stores if s is not main]
    total_work = sum(s.executions * s.ops for s in program.stores)
    unrolled = [
        lv
        for lv in range(n)
        if loops[lv].kind == "unrolled" or 0 < inside[lv] <= loops[lv].auto_unroll
    ]
    scalars = [
        log_scale(main.executions * main.ops),
        log_scale(total_work),
        main.executions * main.ops / max(total_work, 1),
        log_scale(_kind_product(loops, "vectorized")),
        log_scale(_kind_product(loops, "parallel")),
        log_scale(max((loop.auto_unroll for loop in loops), default=0)),
        log_scale(inside[min(unrolled)] if unrolled else 1),
        log_scale(sum(a.footprints(s.loops)[0] * a.itemsize for s in others for a in s.accesses)),
        float(np.mean([any(lp.kind == "vectorized" for lp in s.loops) for s in others]))
        if others
        else 1.0,
        float(np.mean([any(lp.kind == "parallel" for lp in s.loops) for s in others]))
        if others
        else 1.0,
        float(n),
        *gpu_scalars(program),
    ]
    out[at : at + len(scalars)] = scalars
    return out


def _launch(loops: Sequence[Loop], prefix: str) -> int:
    return _product([loop for loop in loops if loop.thread.startswith(prefix)])


def _scope_bytes(program: LoopProgram, scope: str) -> int:
    sizes = {
        a.buffer: math.prod(a.shape) * a.itemsize
        for s in program.stores
        for a in s.accesses
        if a.scope == scope
    }
    return sum(sizes.values())


def gpu_scalars(program: LoopProgram) -> list[float]:
    """`GPU_SCALARS` of a program: the main store's launch shape, shared and per-thread local
    memory, how much of the main store reads from shared memory, and the share of global
    accesses (weighted by executions) whose address moves between neighbouring ``threadIdx.x``
    by no more than one thread's vector, i.e. coalesced ones."""
    main = program.main_store()
    threads = _launch(main.loops, "threadIdx")
    if not any(loop.thread for loop in main.loops):
        return [0.0] * len(GPU_SCALARS)
    reads = [a for a in main.accesses if not a.write]
    coalesced = total = 0
    for store in program.stores:
        width = _kind_product(store.loops, "vectorized")  # elements one thread moves at once
        for access in store.accesses:
            if access.thread_stride < 0 or access.scope != "global":
                continue
            total += store.executions
            coalesced += store.executions * (access.thread_stride <= width)
    return [
        log_scale(threads),
        log_scale(_launch(main.loops, "blockIdx")),
        log_scale(_launch(main.loops, "vthread")),
        threads / (32 * math.ceil(threads / 32)),
        log_scale(_scope_bytes(program, "shared")),
        log_scale(_scope_bytes(program, "local")),
        sum(a.scope == "shared" for a in reads) / max(len(reads), 1),
        coalesced / total if total else 0.0,
    ]
