"""A kernel that packs a weight into its own layout, split so the packing runs once.

On a CPU, MetaSchedule's ``RewriteLayout`` postprocessor gives a function whose weights are
marked layout-free (the ``layout_free_buffers`` attribute, which a model's tasks carry when
they are extracted with weight packing, see `tensortune.model.tasks.extract_tasks`) a block
that copies each such weight into the layout its loops read best, tagged
``meta_schedule.layout_rewrite_preproc``. In a built model that block runs once, at build
time, on the constant weight (``SplitLayoutRewritePreproc`` and ``FoldConstant``). A kernel
timed with the block inside would pay for the copy on every call, so `split_weight_packing`
splits it the same way: ``main`` takes the packed weights, and `PREPACK` packs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

#: Name of the function that packs the weights, in a module whose ``main`` takes them packed.
PREPACK = "prepack"
#: The block annotation of MetaSchedule's weight-packing copy.
PACKING_BLOCK = "meta_schedule.layout_rewrite_preproc"


@dataclasses.dataclass(frozen=True)
class PackedWeight:
    """An argument of a split kernel that ``main`` takes in a packed layout.

    Attributes:
        index: Its position among the kernel's arguments (the same before and after the
            split).
        shape: Its packed shape (same dtype).
    """

    index: int
    shape: tuple[int, ...]


def pack_arguments(
    module: Any, args: Sequence[Any], packed: Sequence[PackedWeight], dev: Any
) -> list[Any]:
    """`args` (TVM tensors on `dev`, in the kernel's order) with each of `packed` replaced by
    its packed copy, made by one call of the loaded `module`'s `PREPACK`."""
    import tvm

    out = list(args)
    if not packed:
        return out
    layouts = [tvm.runtime.empty(w.shape, args[w.index].dtype, dev) for w in packed]
    module[PREPACK](*(args[w.index] for w in packed), *layouts)
    for weight, layout in zip(packed, layouts, strict=True):
        out[weight.index] = layout
    return out


def packs_weights(mod: Any) -> bool:
    """Whether the ``main`` function of TIR module `mod` holds a weight-packing block."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    stack = list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        block = stack.pop()
        if PACKING_BLOCK in sch.get(block).annotations:
            return True
        stack.extend(sch.get_child_blocks(block))
    return False


def split_weight_packing(
    mod: Any, is_input: Sequence[bool]
) -> tuple[Any, tuple[PackedWeight, ...]]:
    """`mod` with ``main`` taking its packed weights and a `PREPACK` function that packs them,
    and the packed arguments in the order `PREPACK` takes them: ``prepack(*originals,
    *packed)``. `mod` must hold a packing block (`packs_weights`, which the caller checks
    first: a kernel that packs nothing needs none of this); `ValueError` otherwise.

    Args:
        mod: A TIR module whose ``main`` is a scheduled kernel.
        is_input: Per argument of ``main``, whether it is an input (the rest are outputs).
    """
    import tvm
    from tvm import relax

    func = mod["main"]
    buffers = list(func.params)  # TVM 0.27: the parameters are the buffers
    if list(is_input) != sorted(is_input, reverse=True):
        raise ValueError("a kernel that packs weights must take its inputs first")
    # The split is Relax's pass, as the model's build makes it: a one-call Relax function.
    builder = relax.BlockBuilder()
    args = [
        relax.Var(f"arg{i}", relax.TensorType(list(b.shape), b.dtype))
        for i, b in enumerate(buffers)
        if is_input[i]
    ]
    outputs = [
        relax.TensorType(list(b.shape), b.dtype) for i, b in enumerate(buffers) if not is_input[i]
    ]
    with builder.function("model", args):
        kernel = builder.add_func(func.without_attr("global_symbol"), "kernel")
        with builder.dataflow():
            out = builder.emit_output(relax.call_tir(kernel, args, outputs))
        builder.emit_func_output(out)
    split = relax.transform.SplitLayoutRewritePreproc()(builder.get())
    # Positions among the inputs, which come first, are positions among all arguments.
    packing, compute, order = _read_split(split, args)
    # The packing function writes the packed weights in the order it reads the originals;
    # each keeps its argument's position in the compute function, with another shape.
    written = list(packing.params)[len(order) :]
    weights = tuple(
        PackedWeight(index, tuple(int(d) for d in buffer.shape))
        for index, buffer in zip(order, written, strict=True)
    )
    for weight in weights:
        got = compute.params[weight.index].shape
        if tuple(int(d) for d in got) != weight.shape:
            raise ValueError("SplitLayoutRewritePreproc moved a packed weight's argument")
    out_mod = tvm.IRModule(
        {
            "main": compute.with_attr("global_symbol", "main"),
            PREPACK: packing.with_attr("global_symbol", PREPACK),
        }
    )
    return out_mod, weights


def _read_split(split: Any, args: list[Any]) -> tuple[Any, Any, list[int]]:
    """The packing and the compute functions of the split one-call module, and the argument
    positions the packing function's inputs come from, in its order."""
    from tvm import relax

    packing = compute = None
    order: list[int] = []
    for binding in split["model"].body.blocks[0].bindings:
        call = binding.value
        if not isinstance(call, relax.Call) or len(call.args) < 2:
            continue
        callee = split[call.args[0]]
        inputs = list(call.args[1].fields)
        if any(not any(a.same_as(x) for x in args) for a in inputs):
            compute = callee  # it reads the packing's result
        else:
            packing = callee
            order = [next(i for i, x in enumerate(args) if x.same_as(a)) for a in inputs]
    if packing is None or compute is None:
        raise ValueError("SplitLayoutRewritePreproc left the kernel whole")
    return packing, compute, order
