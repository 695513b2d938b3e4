"""A design space of our own for the NHWC Winograd convolution: its stages fused per block of
tiles.

MetaSchedule's rules schedule a Winograd task (`tensortune.model.winograd`) stage by stage:
pad the input, transform every tile, multiply by the weight, transform back, each stage
over all tiles and in a parallel loop of its own. Between the stages the whole transformed
input and the whole product go through memory: at 56x56x64 in F(4x4), 1.8 MB each, more than a
core's L2. Alone, timed again and again, the kernel finds them in the L3 cache; in a model,
after other kernels have filled the caches with their own writes, it does not (the dirty
timing, `tensortune.measure.cache_sweep`).

Here one parallel loop runs over blocks of tiles, and each block pads its rows of the input,
transforms its tiles, multiplies them by the weight and transforms them back into the
output (with the fused bias, shortcut and ReLU) before the next: what passes between the
stages is one block's, a few hundred KB that stay in L2. A block is a row of tiles or a
part of a row that divides it, so that the output rows each block writes are its own.

The transforms keep MetaSchedule's loop order: the channel loop outside, each tile's taps
(36 in F(4x4)) unrolled inside it, so that the constant coefficients fold away and LLVM
vectorizes the channels (vectorized in TIR, a tap's coefficients stay multiplications by
ones and zeros). The product's register tile (tiles x vectors of 16 output channels) and
the unroll budget are sampled, so they become knobs as MetaSchedule's own decisions do
(`tensortune.templates.metaschedule`).

In ResNet-18 (packed NHWC Winograd, the CPU default; a Zen 4, 2 threads, 1000 trials, two
seeds) every Winograd task's best was one of these, and its kernels took 1.07-1.24x their
tuning time in the model (seed 0) where MetaSchedule's space's had taken 1.5-2.1x; the build
ran 1.12x [1.01, 1.23] MetaSchedule's speed on the same tasks and 1.14x the build without
them (``studies/README.md``).
"""

from __future__ import annotations

from typing import Any

#: Names of the stages of the NHWC Winograd compute (`tensortune.model.winograd`), as TOPI
#: names them.
STAGES = ("data_pad", "input_tile", "data_pack", "bgemm", "inverse", "conv2d_winograd")
#: Blocks that hold the constant transform matrices, inlined as constants.
MATRICES = ("A", "B")
#: Lanes of the product's vectors: 16 floats, one AVX-512 register (two AVX2 ones).
LANES = 16
#: Most tiles and most vectors of output channels in the product's register tile.
MAX_TILE_ROWS, MAX_VECTORS = 16, 4
#: Unroll budgets the sketch samples from (MetaSchedule's CPU set).
UNROLL_STEPS = (0, 16, 64, 512)


def tile_blocks(height: int, width: int, tile: int) -> list[int]:
    """How many tiles each block may take for an output of `height` x `width` in tiles of
    `tile`: a row of tiles, and the largest proper divisor of a row of at least 4 tiles."""
    across = -(-width // tile)
    smaller = [d for d in range(4, across) if across % d == 0]
    return [across, *smaller[-1:]]


def fused_sketches(mod: Any, seed: int = 0) -> list[Any]:
    """One fused design space (a traced `tvm.s_tir.Schedule`) per block size (`tile_blocks`)
    of the NHWC Winograd convolution in TIR module `mod`, or none where `mod` is not one
    (its stages missing, another layout, a batch of several images, an output that is not
    whole tiles) or TVM refuses the schedule. `seed` (default 0) seeds the schedules' own
    sampling, whose decisions every config replaces."""
    import tvm
    from tvm import s_tir

    shape = _winograd_shape(mod)
    if shape is None:
        return []
    sketches = []
    for block in tile_blocks(*shape):
        sch = s_tir.Schedule(mod, seed=seed + 1, error_render_level="none")
        try:
            _fuse(sch, block)
        except (s_tir.ScheduleError, tvm.error.InternalError, ValueError):
            return []
        sketches.append(sch)
    return sketches


def _winograd_shape(mod: Any) -> tuple[int, int, int] | None:
    """(output height, output width, tile size) of the one-image NHWC Winograd convolution in
    `mod`, or None. Its output must be whole tiles: where the last are partly outside it, TVM
    cannot tell which output rows a block of tiles writes."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    try:
        blocks = {name: sch.get(sch.get_sblock(name)) for name in (*STAGES, *MATRICES)}
    except (s_tir.ScheduleError, ValueError):
        return None
    alpha, _, tiles, _ = (int(d) for d in blocks["bgemm"].writes[0].source.shape)
    batch, height, width, _ = (int(d) for d in blocks["conv2d_winograd"].writes[0].source.shape)
    tile = alpha - 2
    if batch != 1 or tile not in (2, 4) or height % tile or width % tile:
        return None
    if height // tile * (width // tile) != tiles:
        return None
    return height, width, tile


def _fuse(sch: Any, block: int) -> None:
    """Schedule the Winograd convolution in `sch` fused per `block` tiles."""
    for name in MATRICES:
        sch.compute_inline(sch.get_sblock(name))
    output = _inline_epilogue(sch, sch.get_sblock("conv2d_winograd"))
    bgemm = sch.get_sblock("bgemm")
    eps, nu, tiles, channels, reduce = sch.get_loops(bgemm)
    outer, inner = sch.split(tiles, [None, block])
    rows = sch.sample_perfect_tile(inner, n=2, max_innermost_factor=MAX_TILE_ROWS)
    tile_outer, tile_inner = sch.split(inner, rows)
    vectors, lanes = sch.split(channels, [None, LANES])
    counts = sch.sample_perfect_tile(vectors, n=2, max_innermost_factor=MAX_VECTORS)
    vector_outer, vector_inner = sch.split(vectors, counts)
    sch.reorder(outer, eps, nu, tile_outer, vector_outer, reduce, tile_inner, vector_inner, lanes)
    accumulator = sch.cache_write(bgemm, 0, "global")
    sch.reverse_compute_at(accumulator, vector_outer)
    sch.vectorize(lanes)
    sch.unroll(tile_inner)
    sch.unroll(vector_inner)
    # The block's stages around its product: its input rows padded, its tiles transformed,
    # and after the product the inverse transform and the epilogue.
    data_pack = sch.get_sblock("data_pack")
    sch.compute_at(data_pack, outer)
    sch.reverse_compute_at(sch.get_sblock("inverse"), outer)
    sch.reverse_compute_at(output, outer)
    sch.parallel(outer)
    steps = sch.sample_categorical(list(UNROLL_STEPS), [1 / len(UNROLL_STEPS)] * len(UNROLL_STEPS))
    sch.annotate(outer, "pragma_auto_unroll_max_step", steps)
    sch.annotate(outer, "pragma_unroll_explicit", 1)
    _transform_loops(sch, data_pack, "input_tile")
    _transform_loops(sch, sch.get_sblock("inverse"), None)
    # Padded where its tiles gather from, so that the gather reads without a condition.
    sch.compute_at(sch.get_sblock("data_pad"), outer)
    sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("data_pad"))[-1], [None, LANES])[1])
    sch.vectorize(sch.split(sch.get_loops(output)[-1], [None, LANES])[1])
    sch.decompose_reduction(bgemm, reduce)


def _inline_epilogue(sch: Any, block: Any) -> Any:
    """Inline `block` (the tiles' scatter into the output) and the elementwise blocks after it
    (bias, shortcut, ReLU) into the last, which writes the output, and return that one."""
    while consumers := sch.get_consumers(block):
        sch.compute_inline(block)
        (block,) = consumers
    return block


def _transform_loops(sch: Any, block: Any, tile_producer: str | None) -> None:
    """Order a transform's loops (tap, tap, tile, channel, reduction, reduction) as
    MetaSchedule's rule does: tile, channel, then the taps and reductions unrolled; the
    tile's gather (`tile_producer`) at the channel loop."""
    first, second, tile, channel, red_a, red_b = sch.get_loops(block)[-6:]
    sch.reorder(tile, channel, first, second, red_a, red_b)
    if tile_producer is not None:
        sch.compute_at(sch.get_sblock(tile_producer), channel)
    for loop in (first, second, red_a, red_b):
        sch.unroll(loop)
