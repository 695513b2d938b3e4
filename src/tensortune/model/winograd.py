"""Winograd convolution for a model's 3x3 convolutions: a quarter to four ninths of the direct
loop's multiplies.

F(m x m, 3x3) (Lavin and Gray, 2016) computes each m x m tile of an output channel from an
(m+2) x (m+2) tile of each input channel: the tiles and the weights are transformed,
multiplied element by element and summed over the input channels ((m+2)^2 small matrix
products), and transformed back. F(4x4) does 36 multiplies per tile and channel pair where
the direct loop nest does 144; F(2x2) does 16 where it does 36. The transforms cost adds, and
edge tiles are partly wasted, so a layer gains less. F(4x4)'s transformed weight is 2.25x
F(2x2)'s, and each of its elements serves a quarter as many tiles: where a layer has few
tiles and many channels its kernel waits on the weight, and F(2x2) is the faster (`nhwc_tile`).

`conv2d_to_winograd` rewrites every eligible ``relax.nn.conv2d`` of a model into a Winograd
compute applied to the weight transformed by `transformed_weight`: TVM's own in NCHW
(``topi.nn.conv2d_winograd_nchw_without_weight_transform``), and in NHWC (channels-last,
after ``ConvertLayout``) `winograd_conv2d_nhwc`, the same stages as TOPI's NHWC compute, whose
pre-transformed form TVM 0.27 no longer builds. The weight is a constant of the model, so the
``FoldConstant`` pass of `tensortune.model.tasks.fusion_passes` runs its transform once, at
build time; the convolution's bias, residual add and ReLU fuse after it as they do after a
direct one. The data-transform and inverse blocks of TVM's compute carry MetaSchedule's own
CPU schedule rules, so the task is tuned in MetaSchedule's design space like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Output tile size m of F(m x m, 3 x 3) in NCHW: TVM's compute fixes it at 4.
NCHW_TILE = 4
#: Fewest output tiles of 4x4 for NHWC's F(4x4); below it, F(2x2). ResNet-18's layers alone,
#: channels-last (an Emerald Rapids guest, 2 threads; ``studies/README.md``): 56x56 (196 tiles
#: of 4x4) 0.51 ms in F(4x4) against 0.68 in F(2x2), 150 trials; 28x28 (49) 0.52 against
#: 0.49, a tie, and in the model (seed 0, 1000 trials) F(2x2)'s kernels took 0.42-0.46 ms a
#: call where F(4x4)'s had taken 0.29-0.35; 14x14 (16) 445 and 412 µs in F(2x2) against 685
#: and 483 in F(4x4), side by side (two seeds, 100 trials).
MIN_TILES_4X4 = 32
#: Kernel size the rewrite applies to.
KERNEL = 3
#: Fewest output tiles of 4x4 (per image) a convolution needs for the rewrite, whatever tile
#: size it then gets. The transformed weight is 4x (F(4x4): 36 taps) or 1.8x (F(2x2): 16 taps)
#: the direct one, and each of its elements serves one multiply-add per tile. ResNet-18's 7x7
#: layers in F(4x4) (4 tiles) read 38 MB of it a call for 4 multiply-adds each: in the model
#: they took 2.0-2.5 ms a call, 2-3x their time alone, against 1.4-2.1 for the direct
#: convolution (seed 0, 1000 trials, a Zen 4 guest), while its 14x14 layers (16 tiles) won on
#: every reading. In F(2x2) (16 tiles of 2x2) they tied the direct one side by side: 782 and
#: 666 µs against 765 and 692 (two seeds, 100 trials, an Emerald Rapids guest), in 1.2-1.4x its
#: tuning time.
MIN_TILES = 16
#: The name of a Winograd convolution's function, so the head of its task's name
#: (``fused_conv2d_winograd2_add5_relu3``) and its task's kind (`tensortune.model.tasks`).
FUNCTION_NAME = "conv2d_winograd"
#: The (data, kernel, output) layouts the rewrite takes: PyTorch's, and channels-last's.
LAYOUTS = (("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"))
#: TVM's operator pattern "output-elementwise fusable": later elementwise ops fuse into it.
_OUT_ELEMWISE_FUSABLE = 4


def transformed_weight(weight: Any, layout: str = "OIHW", tile: int = NCHW_TILE) -> Any:
    """The te tensor ``G w G^T`` of F(`tile` x `tile`, 3x3) (default `NCHW_TILE`) of a 3x3
    `weight` te tensor in `layout` (``"OIHW"``, the default, or ``"HWIO"``), laid out
    ``(tile + 2, tile + 2, in channels, out channels)`` as both Winograd computes read it:
    output channels innermost, where a kernel vectorizes."""
    from tvm import te
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    if layout == "HWIO":
        kh, kw, in_channels, out_channels = (int(d) for d in weight.shape)
    else:
        out_channels, in_channels, kh, kw = (int(d) for d in weight.shape)
    alpha = tile + kh - 1
    _, _, g = winograd_transform_matrices(tile, kh, str(weight.dtype))
    rh = te.reduce_axis((0, kh), "rh")
    rw = te.reduce_axis((0, kw), "rw")

    def tap(ci: Any, co: Any) -> Any:
        return weight[rh, rw, ci, co] if layout == "HWIO" else weight[co, ci, rh, rw]

    return te.compute(
        (alpha, alpha, in_channels, out_channels),
        lambda eps, nu, ci, co: te.sum(tap(ci, co) * g[eps, rh] * g[nu, rw], axis=[rh, rw]),
        name="winograd_weight",
    )


def output_tiles(
    height: int, width: int, padding: list[int], tile: int = NCHW_TILE
) -> tuple[int, int, int, int]:
    """The output height and width of a 3x3 convolution of stride 1 over a `height` x
    `width` input with `padding` (top, left, bottom, right), and how many `tile` x `tile`
    (default `NCHW_TILE`) tiles cover them down and across (the last ones partly outside where
    they do not divide)."""
    top, left, bottom, right = padding
    out_h, out_w = height + top + bottom - KERNEL + 1, width + left + right - KERNEL + 1
    return out_h, out_w, -(-out_h // tile), -(-out_w // tile)


def has_enough_tiles(height: int, width: int, padding: list[int]) -> bool:
    """Whether the output of a 3x3 convolution of stride 1 over a `height` x `width` input with
    `padding` has the `MIN_TILES` tiles of 4x4 the rewrite needs, whatever tile it then gets."""
    _, _, tiles_h, tiles_w = output_tiles(height, width, padding, 4)
    return tiles_h * tiles_w >= MIN_TILES


def nhwc_tile(height: int, width: int, padding: list[int]) -> int:
    """The output tile size of NHWC's Winograd convolution over a `height` x `width` input with
    `padding`: 4 where the output has at least `MIN_TILES_4X4` tiles of 4x4, else 2 (each
    element of the transformed weight then serves 4x the tiles, for 1.8x the multiplies)."""
    _, _, tiles_h, tiles_w = output_tiles(height, width, padding, 4)
    return 4 if tiles_h * tiles_w >= MIN_TILES_4X4 else 2


def chosen_tile(layout: str, height: int, width: int, padding: list[int]) -> int:
    """The output tile size of the Winograd convolution in `layout` (the data's, ``"NCHW"`` or
    ``"NHWC"``) over a `height` x `width` input with `padding`."""
    return nhwc_tile(height, width, padding) if layout == "NHWC" else NCHW_TILE


def winograd_conv2d(data: Any, weight: Any, padding: list[int]) -> Any:
    """TVM's NCHW Winograd convolution of te tensors `data` and `weight` (transformed by
    `transformed_weight`), stride and dilation 1, `padding` as (top, left, bottom, right).

    TVM's compute pads the input only by `padding`, so where the output is not a whole number
    of tiles its last tiles read past the padded input. Here the bottom and right padding
    grow to whole tiles (zeros, as outside any input), and the output is cropped back."""
    from tvm import te, topi

    top, left, bottom, right = padding
    height, width, tiles_h, tiles_w = output_tiles(int(data.shape[2]), int(data.shape[3]), padding)
    extra_h, extra_w = tiles_h * NCHW_TILE - height, tiles_w * NCHW_TILE - width
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


def winograd_conv2d_nhwc(data: Any, weight: Any, padding: list[int], tile: int = 4) -> Any:
    """The NHWC Winograd convolution F(`tile` x `tile`, 3x3) (default 4) of te tensors `data`
    and `weight` (transformed by `transformed_weight` with the same `tile`), stride and
    dilation 1, `padding` as (top, left, bottom, right).

    The stages and their names are TOPI's NHWC compute's, so that MetaSchedule's CPU rules
    for its data-transform and inverse blocks (``conv2d_nhwc_winograd_*``) schedule them: pad,
    gather each tile, transform it (``B^T d B``), multiply by the weight summing over the
    input channels (36 matrix products), transform back (``A^T m A``), scatter the tiles.
    The input is padded to whole tiles, so the last tiles read zeros, not past it."""
    from tvm import te, topi
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    batch, in_h, in_w, in_channels = (int(d) for d in data.shape)
    out_channels = int(weight.shape[3])
    top, left = padding[:2]
    alpha = tile + KERNEL - 1
    height, width, tiles_h, tiles_w = output_tiles(in_h, in_w, padding, tile)
    tiles = batch * tiles_h * tiles_w
    a, b, _ = winograd_transform_matrices(tile, KERNEL, str(data.dtype))
    # Padded to whole tiles: (tiles - 1) * tile + alpha rows and columns.
    below = (tiles_h - 1) * tile + alpha - in_h - top
    beyond = (tiles_w - 1) * tile + alpha - in_w - left
    padded = topi.nn.pad(
        data,
        (0, top, left, 0),
        (0, below, beyond, 0),
        name="data_pad",
        attrs={"schedule_rule": "None"},
    )

    def tile_of(p: Any) -> tuple[Any, Any, Any]:
        return p // (tiles_h * tiles_w), (p // tiles_w) % tiles_h, p % tiles_w

    def gather(eps: Any, nu: Any, p: Any, ci: Any) -> Any:
        n, th, tw = tile_of(p)
        return padded[n, th * tile + eps, tw * tile + nu, ci]

    input_tile = te.compute(
        (alpha, alpha, tiles, in_channels), gather, name="input_tile",
        attrs={"schedule_rule": "None"},
    )  # fmt: skip
    ra, rb = te.reduce_axis((0, alpha), "r_a"), te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, tiles, in_channels),
        lambda eps, nu, p, ci: te.sum(
            input_tile[ra, rb, p, ci] * b[ra, eps] * b[rb, nu], axis=[ra, rb]
        ),
        name="data_pack",
        attrs={"schedule_rule": "conv2d_nhwc_winograd_data_pack"},
    )
    ci = te.reduce_axis((0, in_channels), "ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, out_channels),
        lambda eps, nu, p, co: te.sum(data_pack[eps, nu, p, ci] * weight[eps, nu, ci, co], axis=ci),
        name="bgemm",
    )
    ra, rb = te.reduce_axis((0, alpha), "r_a"), te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (tile, tile, tiles, out_channels),
        lambda vh, vw, p, co: te.sum(bgemm[ra, rb, p, co] * a[ra, vh] * a[rb, vw], axis=[ra, rb]),
        name="inverse",
        attrs={"schedule_rule": "conv2d_nhwc_winograd_inverse"},
    )

    def scatter(n: Any, h: Any, w: Any, co: Any) -> Any:
        p = (n * tiles_h + h // tile) * tiles_w + w // tile
        return inverse[h % tile, w % tile, p, co]

    return te.compute((batch, height, width, out_channels), scatter, name="conv2d_winograd")


def winograd_tile(call: Any) -> int | None:
    """The output tile size of the Winograd convolution Relax expression `call` becomes
    (`chosen_tile`), or None where it is not a convolution this rewrite takes: ``nn.conv2d``
    in NCHW / OIHW or NHWC / HWIO (`LAYOUTS`), float32, 3x3, stride 1, dilation 1, one group,
    its weight a constant, with at least `MIN_TILES` output tiles of 4x4."""
    import tvm
    from tvm import relax

    if not isinstance(call, relax.Call) or call.op != tvm.ir.Op.get("relax.nn.conv2d"):
        return None
    weight, attrs = call.args[1], call.attrs
    if not isinstance(weight, tvm.ir.expr.GenericConst):  # a weight computed at run time
        return None
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts not in LAYOUTS:
        return None
    shape = dict(zip(layouts[1], (int(d) for d in weight.value.shape), strict=True))
    data_shape = getattr(call.args[0].ty, "shape", None)
    if not isinstance(data_shape, relax.ShapeExpr):
        return None  # a rank known only at run time
    data = dict(zip(layouts[0], data_shape.values, strict=True))
    if not all(isinstance(data[d], tvm.tirx.IntImm) for d in "HW"):
        return None  # a size known only at run time
    height, width, padding = int(data["H"]), int(data["W"]), [int(p) for p in attrs.padding]
    eligible = (
        (shape["H"], shape["W"]) == (KERNEL, KERNEL)
        and has_enough_tiles(height, width, padding)
        and str(weight.value.dtype) == "float32"
        and [int(s) for s in attrs.strides] == [1, 1]
        and [int(d) for d in attrs.dilation] == [1, 1]
        and int(attrs.groups) == 1
        and (attrs.out_dtype is None or str(attrs.out_dtype) in ("", "void", "float32"))
    )
    return chosen_tile(layouts[0], height, width, padding) if eligible else None


def conv2d_to_winograd() -> Any:
    """A module pass that rewrites every eligible convolution (`winograd_tile`) of a Relax
    module's functions into a Winograd convolution of its transformed weight."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Rewriter(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = self.visit_expr_post_order(call)
            tile = winograd_tile(call)
            if tile is None:
                return call
            data, weight = call.args
            layout = str(call.attrs.kernel_layout)
            transformed = self.builder_.emit(
                self.builder_.call_te(
                    transformed_weight, weight, layout, tile, primfunc_name_hint="winograd_weight"
                )
            )
            padding = [int(p) for p in call.attrs.padding]
            compute: Callable[..., Any]
            if layout == "HWIO":
                compute, tile_args = winograd_conv2d_nhwc, [tile]
            else:  # TVM's compute, of `NCHW_TILE`
                compute, tile_args = winograd_conv2d, []
            return self.builder_.call_te(
                compute,
                data,
                transformed,
                padding,
                *tile_args,
                primfunc_name_hint=FUNCTION_NAME,
                primfunc_attrs={"op_pattern": _OUT_ELEMWISE_FUSABLE},
            )

    def rewrite(mod: Any, _context: Any) -> Any:
        rewriter = Rewriter(mod)
        for var, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(var, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return tvm.transform.module_pass(rewrite, opt_level=0, name="Conv2dToWinograd")
