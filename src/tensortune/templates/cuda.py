"""The CUDA template: a GPU schedule space for operators whose main block is a reduction.

Schedule structure (AutoTVM's / MetaSchedule's ``SSSRRS`` for GPUs), per knob:

* every spatial axis longer than 1 is split into four loops, block / virtual thread / thread /
  inner (``tile_<axis>``); each level is fused across axes and bound to ``blockIdx.x``,
  ``vthread.x`` and ``threadIdx.x``, so any number of spatial axes (matmul's 2, batch_matmul's 3,
  conv2d's 4) maps onto one launch dimension;
* every reduction axis is split outer / inner (``tile_<axis>``); the inputs are cached in shared
  memory per outer reduction step (``cache_read`` + ``compute_at``) and loaded cooperatively: the
  copy loops are fused, split by the thread count and bound to ``threadIdx.x``;
* ``vector`` (1, 2, 4; only widths some input can use) vectorises those copies. An input whose
  tile cannot take the width (its innermost index is not a plain loop variable, the width does not
  divide the tile row or the row length, or the copy does not split evenly over the threads) falls
  back to the widest width that fits, so the knob never makes a config invalid;
* results accumulate in registers (``cache_write(..., "local")`` written back per thread) and
  elementwise epilogues (dense_bias_relu's bias + ReLU) are inlined into that write-back;
  producer stages (conv2d's padding) are inlined into the shared-memory copies;
* ``unroll`` is the ``pragma_auto_unroll_max_step`` budget (with ``pragma_unroll_explicit``) on
  the kernel's outermost loop.

Configs over the hardware limits (threads per block above the target's ``max_num_threads``, default
1024; shared memory per block above ``max_shared_memory_per_block``, default 48 KiB) raise
`InvalidConfig` from `check` (hence from `apply`) before anything is built.

`tensortune.templates.template_for` picks this template for a ``cuda`` target; `tune` then
builds candidates here (the CUDA module is embedded in the kernel library), checks and times
them on ``tvm.cuda(0)`` and measures PyTorch's cuBLAS / cuDNN as the vendor baseline; the cost
model reads its launch shape and memory use (`tensortune.features.encodings.gpu_scalars`). Not
done yet: a run on a real GPU (`studies/gpu_study.py` is the one command for it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tensortune.errors import TensortuneError
from tensortune.templates.base import InvalidConfig, KnobTemplate
from tensortune.templates.cpu import analyze
from tensortune.templates.knobs import ChoiceKnob, SplitKnob, UnrollKnob, factorizations

if TYPE_CHECKING:
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import LoopRV, SBlockRV
    from tvm.target import Target

    from tensortune.workloads import Workload

#: The target used when none is given.
DEFAULT_TARGET: dict[str, Any] = {"kind": "cuda", "arch": "sm_90"}
#: CUDA's per-block default (a kernel needs opt-in dynamic shared memory to use more).
DEFAULT_MAX_SHARED_BYTES = 48 * 1024
DEFAULT_MAX_THREADS = 1024
UNROLL_STEPS = (0, 16, 64, 512, 1024)
VECTOR_WIDTHS = (1, 2, 4)
#: What the three outer spatial levels are bound to; the fourth (inner) stays a plain loop.
SPATIAL_BINDINGS = ("blockIdx.x", "vthread.x", "threadIdx.x")


class CudaTemplate(KnobTemplate):
    """Knobs → CUDA schedule for one workload; same interface as `CpuTemplate`.

    Args:
        workload: The operator at its shape. Its main block must be a reduction over spatial axes
            (matmul, batch_matmul, dense_bias_relu, conv2d, depthwise_conv2d); anything else raises
            `TensortuneError`.
        target: A CUDA target as a spec dict or a `tvm.target.Target`; only its limits are read
            (``max_num_threads``, ``max_shared_memory_per_block``). Default
            ``{"kind": "cuda", "arch": "sm_90"}``.
        max_inner: Largest per-thread tile factor of a spatial axis (registers). Default 8.
        max_vthread: Largest virtual-thread factor of a spatial axis. Default 4.
        max_reduce_inner: Largest inner reduction factor (the depth of a shared tile). Default 32.
    """

    def __init__(
        self,
        workload: Workload,
        target: Mapping[str, Any] | Target | None = None,
        max_inner: int = 8,
        max_vthread: int = 4,
        max_reduce_inner: int = 32,
    ) -> None:
        self.workload = workload
        self.target = _target_dict(DEFAULT_TARGET if target is None else target)
        if self.target.get("kind") != "cuda":
            raise TensortuneError(f"CudaTemplate needs a cuda target, got {self.target!r}")
        self.max_threads = int(self.target.get("max_num_threads", DEFAULT_MAX_THREADS))
        self.max_shared_bytes = int(
            self.target.get("max_shared_memory_per_block", DEFAULT_MAX_SHARED_BYTES)
        )
        self.max_inner = max_inner
        self.max_vthread = max_vthread
        self.max_reduce_inner = max_reduce_inner
        self.program = analyze(workload)
        if not self.program.reduction or not self.program.spatial:
            raise TensortuneError(
                f"CudaTemplate schedules a reduction over spatial axes; {workload.name}'s main "
                f"block {self.program.main!r} has axes "
                + ", ".join(f"{a.name}{'(reduce)' if a.reduce else ''}" for a in self.program.axes)
            )
        self.inputs = _read_footprints(workload, self.program.main)

    # -- the space ---------------------------------------------------------------------------
    @functools.cached_property
    def splits(self) -> dict[str, SplitKnob]:
        """One split knob per axis longer than 1, keyed by axis name."""
        out = {}
        for axis in self.program.axes:
            if axis.extent == 1:
                continue
            if axis.reduce:
                out[axis.name] = SplitKnob.over(
                    f"tile_{axis.name}", axis.extent, 2, self.max_reduce_inner
                )
                continue
            splits = [
                s
                for s in factorizations(axis.extent, 4, self.max_inner)
                if s[1] <= self.max_vthread and s[2] <= self.max_threads
            ]
            choices = tuple("x".join(map(str, s)) for s in splits)
            out[axis.name] = SplitKnob(f"tile_{axis.name}", choices, axis.extent)
        return out

    @functools.cached_property
    def knobs(self) -> list[ChoiceKnob]:
        """All knobs in the order they are suggested."""
        knobs: list[ChoiceKnob] = list(self.splits.values())
        knobs.append(UnrollKnob("unroll", UNROLL_STEPS))
        widths = tuple(v for v in VECTOR_WIDTHS if any(r.may_vectorize(v) for r in self.inputs))
        if len(widths) > 1:
            knobs.append(ChoiceKnob("vector", widths))
        return knobs

    def check(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config restricted to this template's knobs.

        Raises `ValueError` if a knob is missing or outside its space, and `InvalidConfig` (a
        `ValueError`) naming the limit if the config needs more threads or shared memory per block
        than the target has.
        """
        out = super().check(config)
        threads = self.threads_per_block(out)
        if threads > self.max_threads:
            raise InvalidConfig(
                f"{threads} threads per block exceed the limit max_num_threads={self.max_threads}"
            )
        shared = self.shared_bytes(out)
        if shared > self.max_shared_bytes:
            raise InvalidConfig(
                f"{shared} bytes of shared memory per block exceed the limit "
                f"max_shared_memory_per_block={self.max_shared_bytes}"
            )
        return out

    def factors(self, config: Mapping[str, Any]) -> dict[str, list[int]]:
        """Each axis's split factors under `config`, outer to inner (all ones for extent-1 axes)."""
        out = {}
        for axis in self.program.axes:
            knob = self.splits.get(axis.name)
            levels = 2 if axis.reduce else 4
            out[axis.name] = knob.factors(config[knob.name]) if knob else [1] * levels
        return out

    def threads_per_block(self, config: Mapping[str, Any]) -> int:
        """Product of the thread-level factors of the spatial axes."""
        factors = self.factors(config)
        return math.prod(factors[a.name][2] for a in self.program.spatial)

    def shared_bytes(self, config: Mapping[str, Any]) -> int:
        """Shared memory one block allocates: every input's tile for one outer reduction step."""
        tile = self._tile_extents(config)
        return sum(r.tile_elements(tile) * r.dtype_bytes for r in self.inputs)

    def _tile_extents(self, config: Mapping[str, Any]) -> dict[str, int]:
        """Extent of each axis inside one block and one outer reduction step."""
        factors = self.factors(config)
        return {
            a.name: math.prod(factors[a.name][1:]) if not a.reduce else factors[a.name][1]
            for a in self.program.axes
        }

    def _schedule(self, sch: Schedule, config: Mapping[str, Any]) -> None:
        program = self.program
        main = sch.get_sblock(program.main)
        factors = self.factors(config)
        loops = sch.get_loops(main)
        spatial: list[list[LoopRV]] = [[], [], [], []]
        reduce: list[list[LoopRV]] = [[], []]
        for axis, loop in zip(program.axes, loops, strict=True):
            tiles = sch.split(loop, factors=factors[axis.name])
            for level, tile in enumerate(tiles):
                (reduce if axis.reduce else spatial)[level].append(tile)
        sch.reorder(*spatial[0], *spatial[1], *spatial[2], *reduce[0], *reduce[1], *spatial[3])

        # One launch dimension per level: fuse the level across axes, then bind it.
        bound = []
        for level_loops, tag in zip(spatial[:3], SPATIAL_BINDINGS, strict=True):
            fused = sch.fuse(*level_loops)
            sch.bind(fused, tag)
            bound.append(fused)
        block_loop, thread_loop = bound[0], bound[2]

        # Registers: accumulate per thread, write back (with the epilogue inlined) per thread.
        write_back = sch.cache_write(main, 0, "local")
        sch.reverse_compute_at(write_back, thread_loop)
        for name in program.consumers:
            sch.reverse_compute_inline(sch.get_sblock(name))

        # Shared memory: each input's tile for one outer reduction step, loaded by all threads.
        anchor = reduce[0][-1]
        threads = self.threads_per_block(config)
        tile = self._tile_extents(config)
        for index, read in enumerate(self.inputs):
            copy = sch.cache_read(main, index, "shared")
            sch.compute_at(copy, anchor)
            width = read.vector_width(config.get("vector", 1), tile, threads)
            self._cooperative_load(sch, copy, len(bound) + len(reduce[0]), threads, width)
        for name in reversed(program.producers):  # padding: computed inside the copies
            sch.compute_inline(sch.get_sblock(name))

        unroll: UnrollKnob = self._knob("unroll")  # type: ignore[assignment]
        unroll.apply(sch, block_loop, config["unroll"])
        sch.decompose_reduction(main, reduce[0][0])

    @staticmethod
    def _cooperative_load(
        sch: Schedule, copy: SBlockRV, depth: int, threads: int, width: int
    ) -> None:
        """Fuse the copy loops below the first `depth` loops, spread them over the threads and
        vectorise `width` consecutive elements."""
        inner = sch.get_loops(copy)[depth:]
        # A one-element tile keeps no loop of its own: give it one to bind.
        fused = sch.fuse(*inner) if inner else sch.add_unit_loop(copy)
        if width > 1:
            _, thread, vector = sch.split(fused, factors=[None, threads, width])
            sch.vectorize(vector)
        else:
            _, thread = sch.split(fused, factors=[None, threads])
        sch.bind(thread, "threadIdx.x")

    def _knob(self, name: str) -> ChoiceKnob:
        return next(k for k in self.knobs if k.name == name)


@dataclasses.dataclass(frozen=True)
class _Read:
    """One input of the main block: how its shared tile's size follows from the tile extents.

    ``region`` has, per dimension, the index's coefficient per axis (indices are affine in the
    axes) and the extent read at once.
    """

    name: str
    shape: list[int]
    dtype_bytes: int
    region: list[tuple[dict[str, int], int]]

    def extents(self, tile: Mapping[str, int]) -> list[int]:
        """The tile's extent per dimension when each axis spans `tile[axis]` values."""
        return [
            min(size, sum(abs(c) * (tile[a] - 1) for a, c in coeffs.items()) + extent)
            for (coeffs, extent), size in zip(self.region, self.shape, strict=True)
        ]

    def tile_elements(self, tile: Mapping[str, int]) -> int:
        return math.prod(self.extents(tile))

    def _row_axis(self) -> str | None:
        """The axis that alone indexes the innermost dimension with stride 1, if any."""
        coeffs, extent = self.region[-1]
        if extent == 1 and len(coeffs) == 1 and next(iter(coeffs.values())) == 1:
            return next(iter(coeffs))
        return None

    def may_vectorize(self, width: int) -> bool:
        """Whether some tiling lets this input's copy use `width`-wide loads."""
        return width == 1 or (self._row_axis() is not None and self.shape[-1] % width == 0)

    def vector_width(self, wanted: int, tile: Mapping[str, int], threads: int) -> int:
        """The widest width <= `wanted` that keeps every vector inside one aligned row of the
        tile and splits the copy evenly over `threads`."""
        row = self._row_axis()
        extents = self.extents(tile)
        width = wanted
        while width > 1:
            if (
                row is not None
                and self.shape[-1] % width == 0
                and extents[-1] % width == 0
                and math.prod(extents) % (threads * width) == 0
            ):
                return width
            width //= 2
        return 1


def _read_footprints(workload: Workload, main: str) -> list[_Read]:
    """The main block's inputs in read order, with affine index coefficients per axis."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(workload.prim_func())
    block = sch.get(sch.get_sblock(main))
    axis_vars = [v.var for v in block.iter_vars]
    names = [v.var.name.removeprefix("v_") for v in block.iter_vars]
    reads = []
    for region in block.reads:
        dims = []
        for rng in region.region:
            coeffs = tvm.sym.detect_linear_equation(rng.min, axis_vars)
            if not coeffs:
                raise TensortuneError(
                    f"CudaTemplate needs affine indices; {region.source.name} is read at {rng.min}"
                )
            dims.append(
                (
                    {n: int(c) for n, c in zip(names, coeffs[:-1], strict=True) if int(c) != 0},
                    int(rng.extent),
                )
            )
        buffer = region.source
        size = tvm.runtime.DataType(buffer.dtype).bits // 8
        reads.append(_Read(buffer.name, [int(d) for d in buffer.shape], size, dims))
    return reads


def _target_dict(target: Mapping[str, Any] | Target) -> dict[str, Any]:
    if isinstance(target, Mapping):
        return dict(target)
    attrs = {str(k): v for k, v in target.attrs.items()}
    for key, value in attrs.items():  # IntImm / String → Python values
        attrs[key] = int(value) if hasattr(value, "value") else str(value)
    return {"kind": target.kind.name, **attrs}


def verify_gpu_limits(mod: IRModule, template: CudaTemplate) -> bool:
    """Whether the lowered kernels of `mod` (a scheduled module) respect `template`'s target
    limits, by TVM's ``verify_gpu_code`` on each device function."""
    import tvm
    from tvm import s_tir, tirx

    target = tvm.target.Target(template.target)
    pipeline = tirx.get_tir_pipeline("s_tir")[0]
    lowered = pipeline(tirx.transform.BindTarget(target)(mod))
    constraints = {
        "max_threads_per_block": template.max_threads,
        "max_shared_memory_per_block": template.max_shared_bytes,
    }
    # Without a host target nothing is split off, so the whole function is checked.
    funcs = [f for _, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)]
    return bool(funcs) and all(s_tir.analysis.verify_gpu_code(f, constraints) for f in funcs)
