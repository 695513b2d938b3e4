"""The loop program a config produces: its loop nests, buffer accesses and arithmetic.

A scheduled program is lowered just far enough that blocks are gone and every buffer access
is an index expression over plain loop variables, with loop kinds still intact (TVM's
vectorize/unroll passes have not run yet). The walk then records, for every buffer store, the
loops around it and, for every buffer it touches, how each index moves with each loop. All
the feature encodings (`tensortune.features.encodings`) are computed from this record.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tvm import IRModule

#: Loop kinds, as the encodings see them.
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread")


@dataclasses.dataclass(frozen=True)
class Loop:
    """One loop around a store.

    Attributes:
        name: Loop variable name (unique within one nest).
        extent: Trip count.
        kind: One of `LOOP_KINDS`.
        auto_unroll: The ``pragma_auto_unroll_max_step`` in effect at this loop (0: none).
        thread: For a GPU launch dimension (kind ``"thread"``), its tag: ``"blockIdx.x"``,
            ``"vthread.x"``, ``"threadIdx.x"``, ...; empty for any other loop.
        uid: Number of this loop in the program (1, 2, ... in program order), which tells the
            loops two stores share from equal-looking siblings (the loop tree needs it).
    """

    name: str
    extent: int
    kind: str
    auto_unroll: int
    thread: str = ""
    uid: int = 0


@dataclasses.dataclass(frozen=True)
class Access:
    """How one buffer is touched under a nest.

    Attributes:
        buffer: Buffer name.
        shape: Buffer shape (compacted for local buffers).
        itemsize: Bytes per element.
        write: Whether the store writes it (a buffer both read and written counts once).
        scope: Storage scope: ``"global"``, or on GPUs ``"shared"`` / ``"local"``.
        thread_stride: Elements between the addresses of ``threadIdx.x`` 0 and 1 (all other
            loops at 0), which decides coalescing; -1 outside a ``threadIdx.x`` launch.
        coefficients: ``coefficients[d][l]``: how far index dimension d moves per step of loop
            l of the nest (for a non-affine index, its span over the loop divided by the
            loop's steps, rounded up).
    """

    buffer: str
    shape: tuple[int, ...]
    itemsize: int
    write: bool
    coefficients: tuple[tuple[int, ...], ...]
    scope: str = "global"
    thread_stride: int = -1

    def stride(self, level: int) -> int:
        """Elements moved in the row-major buffer per step of loop `level`."""
        total, step = 0, 1
        for dim in reversed(range(len(self.shape))):
            total += self.coefficients[dim][level] * step
            step *= self.shape[dim]
        return abs(total)

    def footprints(self, loops: Sequence[Loop]) -> list[int]:
        """Distinct elements touched by one execution of each loop level (the loops from that
        level inwards); entry ``len(loops)`` is a single access."""
        spans = [0] * len(self.shape)
        out = [1] * (len(loops) + 1)
        for level in reversed(range(len(loops))):
            steps = loops[level].extent - 1
            elements = 1
            for dim, size in enumerate(self.shape):
                spans[dim] += abs(self.coefficients[dim][level]) * steps
                elements *= min(size, spans[dim] + 1)
            out[level] = elements
        return out


@dataclasses.dataclass(frozen=True)
class Store:
    """One buffer store with the loops around it, outermost first.

    Attributes:
        loops: The enclosing loops, outermost first.
        accesses: The written buffer first, then the read ones in order of appearance.
        arith: Operation counts of one execution: ``{"add", "mul", "div", "minmax", "other"}``.
    """

    loops: tuple[Loop, ...]
    accesses: tuple[Access, ...]
    arith: dict[str, int]

    @property
    def executions(self) -> int:
        out = 1
        for loop in self.loops:
            out *= loop.extent
        return out

    @property
    def ops(self) -> int:
        """Arithmetic operations in one execution (at least 1, a plain copy counts as one)."""
        return max(1, sum(self.arith.values()))


@dataclasses.dataclass(frozen=True)
class LoopProgram:
    """All stores of a lowered program, in program order."""

    stores: tuple[Store, ...]

    def main_store(self) -> Store:
        """The store doing the most arithmetic in total (the operator's inner update)."""
        return max(self.stores, key=lambda s: (s.executions * s.ops, len(s.accesses)))


@functools.cache
def _lowering() -> Any:
    from tvm import ir
    from tvm.s_tir import transform as st

    return ir.transform.Sequential(
        [
            st.CanonicalizeLoop(),
            st.LowerInitBlock(),
            st.PlanAndUpdateBufferAllocationLocation(),
            st.ConvertBlocksToOpaque(),
            st.CompactBufferAllocation(),
            st.StmtSimplify(),
            st.LowerOpaqueBlock(),
        ]
    )


def lower_for_features(mod: IRModule) -> IRModule:
    """Blocks removed, indices over loop variables, loop kinds kept."""
    return _lowering()(mod)


def loop_program(mod: IRModule) -> LoopProgram:
    """Walk the ``main`` function of an already scheduled module into a `LoopProgram`."""
    return walk(lower_for_features(mod)["main"].body)


_KIND_NAMES = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread"}
_AUTO_UNROLL = "pragma_auto_unroll_max_step"
#: Attributes that open a GPU launch dimension once blocks are lowered (``launch_thread``).
_LAUNCH = ("thread_extent", "virtual_thread")


def walk(body: Any) -> LoopProgram:
    """The stores of a lowered statement, each with its loops and accesses."""
    import tvm
    import tvm_ffi
    from tvm import sym, tirx

    analyzer = sym.Analyzer()
    stack: list[tuple[Any, Loop]] = []
    uids = itertools.count(1)
    # A launch whose tag is already open names the same hardware index with a new variable
    # (cooperative loads do this): (that variable, the level of the open one).
    aliases: list[tuple[Any, int]] = []
    pragmas: dict[str, int] = {}
    stores: list[Store] = []

    def nest(var: Any, extent: Any, kind: str, thread: str, node: Any, visitor: Any) -> Any:
        inherited = stack[-1][1].auto_unroll if stack else 0
        loop = Loop(
            name=var.name,
            extent=int(extent),
            kind=kind,
            auto_unroll=pragmas.pop(var.name, inherited),
            thread=thread,
            uid=next(uids),
        )
        stack.append((var, loop))
        try:
            return visitor.default_visit(node)
        finally:
            stack.pop()

    def on_attr(node: Any, visitor: Any) -> Any:
        if node.attr_key == _AUTO_UNROLL:
            pragmas[node.node.name] = int(node.value)
        elif node.attr_key in _LAUNCH:
            # A launch dimension is a loop run by the hardware: it belongs in the nest.
            iv = node.node
            tag = str(iv.thread_tag)
            level = _launch_level(stack, tag)
            if level is None:
                return nest(iv.var, node.value, "thread", tag, node, visitor)
            aliases.append((iv.var, level))
            try:
                return visitor.default_visit(node)
            finally:
                aliases.pop()
        return visitor.default_visit(node)

    def on_for(node: Any, visitor: Any) -> Any:
        kind = _KIND_NAMES.get(int(node.kind), "serial")
        thread = str(node.thread_binding.thread_tag) if node.thread_binding else ""
        return nest(node.loop_var, node.extent, kind, thread, node, visitor)

    def on_store(node: Any, visitor: Any) -> None:
        loads: list[Any] = []
        counts = dict.fromkeys(("add", "mul", "div", "minmax", "other"), 0)

        def on_load(load: Any, _visitor: Any) -> None:
            loads.append(load)  # not descending: index arithmetic is not the kernel's work

        def counter(kind: str) -> Any:
            def on_op(op: Any, op_visitor: Any) -> Any:
                counts[kind] += 1
                return op_visitor.default_visit(op)

            return on_op

        tvm_ffi.structural_visit(
            node.value,
            [(tvm.ir.TensorLoad, on_load)] + [(op, counter(kind)) for op, kind in _arith_ops()],
        )
        loop_vars = [var for var, _ in stack]
        loops = tuple(loop for _, loop in stack)
        seen: dict[str, Access] = {}
        for buffer, indices, write in [(node.buffer, node.indices, True)] + [
            (load.source, load.indices, False) for load in loads
        ]:
            if buffer.name in seen:
                continue
            seen[buffer.name] = Access(
                buffer=buffer.name,
                shape=tuple(int(d) for d in buffer.shape),
                itemsize=max(1, tvm.DataType(buffer.dtype).bits // 8),
                write=write,
                coefficients=tuple(
                    _coefficients(analyzer, index, loop_vars, loops, aliases) for index in indices
                ),
                scope=str(buffer.scope()),
                thread_stride=_thread_stride(analyzer, buffer, indices, stack, aliases),
            )
        stores.append(_without_idle_vthreads(Store(loops, tuple(seen.values()), counts)))

    tvm_ffi.structural_visit(
        body, [(tirx.AttrStmt, on_attr), (tirx.For, on_for), (tirx.BufferStore, on_store)]
    )
    return LoopProgram(stores=tuple(stores))


def _launch_level(stack: Sequence[tuple[Any, Loop]], tag: str) -> int | None:
    """Level of the open launch dimension with `tag` in the nest, None if there is none."""
    return next((i for i, (_, loop) in enumerate(stack) if loop.thread == tag), None)


def _thread_stride(
    analyzer: Any,
    buffer: Any,
    indices: Sequence[Any],
    stack: Sequence[tuple[Any, Loop]],
    aliases: Sequence[tuple[Any, int]],
) -> int:
    """Row-major address of `indices` at ``threadIdx.x`` = 1 minus at 0, other loops at 0.
    Fused cooperative loads index through floordiv/floormod, so this evaluates the index at
    both points rather than reading a linear coefficient."""
    from tvm import sym

    level = _launch_level(stack, "threadIdx.x")
    if level is None:
        return -1

    def address(value: int) -> int:
        dom = {var: sym.IntervalSet(0, 0) for var, _ in stack}
        for var in [stack[level][0], *(a for a, at in aliases if at == level)]:
            dom[var] = sym.IntervalSet(value, value)
        total = 0
        for index, size in zip(indices, buffer.shape, strict=True):
            total = total * int(size) + int(analyzer.int_set(index, dom).min_value)
        return total

    try:
        return abs(address(1) - address(0))
    except (TypeError, ValueError):
        return -1  # an index over variables that are not loops here


def _without_idle_vthreads(store: Store) -> Store:
    """The store without virtual threads its indices ignore: TVM replicates a statement only
    over the virtual threads it uses, so such a loop does not run it again."""
    idle = [
        level
        for level, loop in enumerate(store.loops)
        if loop.thread.startswith("vthread")
        and not any(c[level] for a in store.accesses for c in a.coefficients)
    ]
    if not idle:
        return store

    def keep(values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(v for level, v in enumerate(values) if level not in idle)

    accesses = tuple(
        dataclasses.replace(a, coefficients=tuple(keep(c) for c in a.coefficients))
        for a in store.accesses
    )
    return Store(keep(store.loops), accesses, store.arith)


def _coefficients(
    analyzer: Any,
    index: Any,
    loop_vars: Sequence[Any],
    loops: Sequence[Loop],
    aliases: Sequence[tuple[Any, int]] = (),
) -> tuple[int, ...]:
    """Per-loop index steps; an alias's step counts towards the loop it stands for."""
    from tvm import sym

    if not loop_vars:
        return ()
    names = [*loop_vars, *(var for var, _ in aliases)]
    linear = sym.detect_linear_equation(index, names)
    if len(linear) == len(names) + 1 and all(isinstance(c, tvm_int_types()) for c in linear[:-1]):
        steps = [int(c) for c in linear[: len(loop_vars)]]
        for (_, level), c in zip(aliases, linear[len(loop_vars) : -1], strict=True):
            steps[level] += int(c)
        return tuple(steps)
    # Non-affine (a fused loop's floordiv/floormod): the index's span over each loop alone.
    out = []
    for level, (var, loop) in enumerate(zip(loop_vars, loops, strict=True)):
        if loop.extent <= 1:
            out.append(0)
            continue
        span_of = sym.IntervalSet(0, loop.extent - 1)
        ranges = {var: span_of, **{a: span_of for a, at in aliases if at == level}}
        bounds = analyzer.int_set(index, ranges)
        try:
            span = int(analyzer.simplify(bounds.max_value - bounds.min_value))
        except (TypeError, ValueError):
            span = 0  # depends on other loops only through bounds we can't resolve
        out.append(-(-span // (loop.extent - 1)))
    return tuple(out)


@functools.cache
def _arith_ops() -> tuple[tuple[type, str], ...]:
    import tvm
    from tvm import tirx

    return (
        (tirx.Add, "add"),
        (tirx.Sub, "add"),
        (tirx.Mul, "mul"),
        (tirx.Div, "div"),
        (tirx.FloorDiv, "div"),
        (tirx.Max, "minmax"),
        (tirx.Min, "minmax"),
        (tirx.Select, "other"),
        (tvm.ir.Call, "other"),
    )


@functools.cache
def tvm_int_types() -> tuple[type, ...]:
    from tvm import tirx

    return (tirx.IntImm,)
