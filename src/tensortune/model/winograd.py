"""Winograd convolution for a model's 3x3 convolutions: a quarter of the direct loop's multiplies.

F(4x4, 3x3) (Lavin and Gray, 2016) computes each 4x4 tile of an output channel from a 6x6
tile of each input channel: the tiles and the weights are transformed, multiplied element by
element and summed over the input channels (36 small matrix products), and transformed back.
That is 36 multiplies per tile and channel pair where the direct loop nest does 144. The
transforms cost adds, and edge tiles are partly wasted, so a layer gains less than 4x.

`conv2d_to_winograd` rewrites every eligible ``relax.nn.conv2d`` of a model into TVM's own
compute (``topi.nn.conv2d_winograd_nchw_without_weight_transform``) applied to the weight
transformed by `transformed_weight`. The weight is a constant of the model, so the
``FoldConstant`` pass of `tensortune.model.tasks.fusion_passes` runs its transform once, at
build time; the convolution's bias, residual add and ReLU fuse after it as they do after a
direct one. The data-transform and inverse blocks of TVM's compute carry MetaSchedule's own
CPU schedule rules, so the task is tuned in MetaSchedule's design space like any other.
"""

from __future__ import annotations

from typing import Any

#: Output tile size m of F(m x m, 3 x 3): TVM's NCHW compute fixes it at 4.
TILE = 4
#: Kernel size the rewrite applies to.
KERNEL = 3
#: TVM's operator pattern "output-elementwise fusable": later elementwise ops fuse into it.
_OUT_ELEMWISE_FUSABLE = 4


def transformed_weight(weight: Any) -> Any:
    """The te tensor ``G w G^T`` of an OIHW 3x3 `weight` te tensor, laid out
    ``(6, 6, in channels, out channels)`` as TVM's Winograd compute reads it."""
    from tvm import te
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    out_channels, in_channels, kh, kw = (int(d) for d in weight.shape)
    alpha = TILE + kh - 1
    _, _, g = winograd_transform_matrices(TILE, kh, str(weight.dtype))
    rh = te.reduce_axis((0, kh), "rh")
    rw = te.reduce_axis((0, kw), "rw")
    return te.compute(
        (alpha, alpha, in_channels, out_channels),
        lambda eps, nu, ci, co: te.sum(
            weight[co, ci, rh, rw] * g[eps, rh] * g[nu, rw], axis=[rh, rw]
        ),
        name="winograd_weight",
    )


def winograd_conv2d(data: Any, weight: Any, padding: list[int]) -> Any:
    """TVM's NCHW Winograd convolution of te tensors `data` and `weight` (transformed by
    `transformed_weight`), stride and dilation 1, `padding` as (top, left, bottom, right).

    TVM's compute pads the input only by `padding`, so where the output is not a whole number
    of tiles its last tiles read past the padded input. Here the bottom and right padding
    grow to whole tiles (zeros, as outside any input), and the output is cropped back."""
    from tvm import te, topi

    top, left, bottom, right = padding
    height = int(data.shape[2]) + top + bottom - KERNEL + 1
    width = int(data.shape[3]) + left + right - KERNEL + 1
    extra_h, extra_w = -height % TILE, -width % TILE
    out = topi.nn.conv2d_winograd_nchw_without_weight_transform(
        data, weight, 1, [top, left, bottom + extra_h, right + extra_w], 1, str(data.dtype)
    )
    if not extra_h and not extra_w:
        return out
    batch, channels = (int(d) for d in out.shape[:2])
    return te.compute(
        (batch, channels, height, width),
        lambda n, c, h, w: out[n, c, h, w],
        name="winograd_crop",
    )


def is_eligible(call: Any) -> bool:
    """Whether Relax expression `call` is a convolution this rewrite takes: ``nn.conv2d`` in
    NCHW / OIHW, float32, 3x3, stride 1, dilation 1, one group, its weight a constant."""
    import tvm
    from tvm import relax

    if not isinstance(call, relax.Call) or call.op != tvm.ir.Op.get("relax.nn.conv2d"):
        return False
    weight, attrs = call.args[1], call.attrs
    if not isinstance(weight, tvm.ir.expr.GenericConst):  # a weight computed at run time
        return False
    shape = [int(d) for d in weight.value.shape]
    return (
        shape[2:] == [KERNEL, KERNEL]
        and str(weight.value.dtype) == "float32"
        and [int(s) for s in attrs.strides] == [1, 1]
        and [int(d) for d in attrs.dilation] == [1, 1]
        and int(attrs.groups) == 1
        and (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NCHW", "OIHW", "NCHW")
        and (attrs.out_dtype is None or str(attrs.out_dtype) in ("", "void", "float32"))
    )


def conv2d_to_winograd() -> Any:
    """A module pass that rewrites every eligible convolution (`is_eligible`) of a Relax
    module's functions into a Winograd convolution of its transformed weight."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Rewriter(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = self.visit_expr_post_order(call)
            if not is_eligible(call):
                return call
            data, weight = call.args
            transformed = self.builder_.emit(
                self.builder_.call_te(
                    transformed_weight, weight, primfunc_name_hint="winograd_weight"
                )
            )
            return self.builder_.call_te(
                winograd_conv2d,
                data,
                transformed,
                [int(p) for p in call.attrs.padding],
                primfunc_name_hint="conv2d_winograd",
                primfunc_attrs={"op_pattern": _OUT_ELEMWISE_FUSABLE},
            )

    def rewrite(mod: Any, _context: Any) -> Any:
        rewriter = Rewriter(mod)
        for var, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(var, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return tvm.transform.module_pass(rewrite, opt_level=0, name="Conv2dToWinograd")
