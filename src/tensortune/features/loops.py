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
    """

    name: str
    extent: int
    kind: str
    auto_unroll: int


@dataclasses.dataclass(frozen=True)
class Access:
    """How one buffer is touched under a nest.

    Attributes:
        buffer: Buffer name.
        shape: Buffer shape (compacted for local buffers).
        itemsize: Bytes per element.
        write: Whether the store writes it (a buffer both read and written counts once).
        coefficients: ``coefficients[d][l]``: how far index dimension d moves per step of loop
            l of the nest (for a non-affine index, its span over the loop divided by the
            loop's steps, rounded up).
    """

    buffer: str
    shape: tuple[int, ...]
    itemsize: int
    write: bool
    coefficients: tuple[tuple[int, ...], ...]

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


def walk(body: Any) -> LoopProgram:
    """The stores of a lowered statement, each with its loops and accesses."""
    import tvm
    import tvm_ffi
    from tvm import sym, tirx

    analyzer = sym.Analyzer()
    stack: list[tuple[Any, Loop]] = []
    pragmas: dict[str, int] = {}
    stores: list[Store] = []

    def on_attr(node: Any, visitor: Any) -> Any:
        if node.attr_key == _AUTO_UNROLL:
            pragmas[node.node.name] = int(node.value)
        return visitor.default_visit(node)

    def on_for(node: Any, visitor: Any) -> Any:
        name = node.loop_var.name
        inherited = stack[-1][1].auto_unroll if stack else 0
        loop = Loop(
            name=name,
            extent=int(node.extent),
            kind=_KIND_NAMES.get(int(node.kind), "serial"),
            auto_unroll=pragmas.pop(name, inherited),
        )
        stack.append((node.loop_var, loop))
        try:
            return visitor.default_visit(node)
        finally:
            stack.pop()

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
                    _coefficients(analyzer, index, loop_vars, loops) for index in indices
                ),
            )
        stores.append(Store(loops=loops, accesses=tuple(seen.values()), arith=counts))

    tvm_ffi.structural_visit(
        body, [(tirx.AttrStmt, on_attr), (tirx.For, on_for), (tirx.BufferStore, on_store)]
    )
    return LoopProgram(stores=tuple(stores))


def _coefficients(
    analyzer: Any, index: Any, loop_vars: Sequence[Any], loops: Sequence[Loop]
) -> tuple[int, ...]:
    from tvm import sym

    if not loop_vars:
        return ()
    linear = sym.detect_linear_equation(index, list(loop_vars))
    if len(linear) == len(loop_vars) + 1 and all(
        isinstance(c, tvm_int_types()) for c in linear[:-1]
    ):
        return tuple(int(c) for c in linear[:-1])
    # Non-affine (a fused loop's floordiv/floormod): the index's span over each loop alone.
    out = []
    for var, loop in zip(loop_vars, loops, strict=True):
        if loop.extent <= 1:
            out.append(0)
            continue
        bounds = analyzer.int_set(index, {var: sym.IntervalSet(0, loop.extent - 1)})
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
