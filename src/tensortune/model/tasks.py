"""A model's tuning tasks: its fused TIR functions, how often each runs, and each as a workload.

The Relax module is legalized and fused by the passes that `build` applies before it looks
kernels up in the database (TVM's ``compile_relax`` order: library dispatch, ``LegalizeOps``,
``AnnotateTIROpPattern``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``), so that a task's
function is structurally the one the build asks for. Tasks are named by the structural hash of
that function: the same kernel in another model, or in an earlier run, is the same task and
the same study.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING, Any

from tensortune.errors import TensortuneError, last_line
from tensortune.model.winograd import FUNCTION_NAME as WINOGRAD_FUNCTION
from tensortune.model.winograd import conv2d_to_winograd
from tensortune.workloads.script import register_script

if TYPE_CHECKING:
    from tensortune.workloads import Workload


@dataclasses.dataclass(frozen=True)
class ModelTask:
    """One fused TIR function of a model.

    Attributes:
        name: TVM's name of the fused function, e.g. ``fused_conv2d_add_relu``.
        key: Hex structural hash of the function: the task's identity across models and runs.
        weight: How many times one run of the model calls it.
        script: Its TVMScript, from which every process rebuilds it.
    """

    name: str
    key: str
    weight: int
    script: str

    @property
    def kind(self) -> str:
        """Its leading operator, e.g. ``conv2d`` for ``fused_conv2d9_add7_relu4``, and
        ``conv2d_winograd`` for a Winograd convolution's (`tensortune.model.winograd`): tasks
        of one kind are expected to reach alike FLOP/s (see `tensortune.model.scheduler`), and
        a Winograd task's FLOPs count its batched products alone, under half the direct
        convolution's, so it reaches about half a direct one's FLOP/s at its best."""
        head = self.name.removeprefix("fused_")
        if head.startswith(WINOGRAD_FUNCTION):
            return WINOGRAD_FUNCTION
        head = head.split("_", 1)[0]
        return re.sub(r"\d+$", "", head) or head

    @functools.cached_property
    def flops(self) -> float:
        """Floating-point operations of one call (its workload's ``flop_count``)."""
        return self.workload().flop_count

    @property
    def workload_name(self) -> str:
        """The name its workload is registered under: ``task_<key>``."""
        return f"task_{self.key}"

    def workload(self) -> Workload:
        """The task as a workload (registered on first use; see
        `tensortune.workloads.script.register_script`)."""
        from tensortune.workloads import get_workload

        register_script(self.workload_name, self.script)
        return get_workload(self.workload_name)


def fusion_passes(target: Any) -> list[Any]:
    """The passes from a Relax model to the fused TIR functions the database keys on."""
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):  # a target kind without a dispatch list
        dispatch = []
    return [
        *dispatch,
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


@dataclasses.dataclass(frozen=True)
class Rewrites:
    """The optional rewrites a model's tasks are made with, for CPU (llvm) targets. Each
    makes other functions, so other tasks and other studies than a model tuned without it.

    Attributes:
        prepack_weights: Mark the model's weights (its constants) layout-free in every fused
            function, so that a CPU schedule may pack them into another layout, once, at
            build time (see `tensortune.templates.weight_packing`). Default False.
        winograd: Compute the model's 3x3 convolutions of stride 1 as Winograd convolutions
            of their weights transformed at build time (`tensortune.model.winograd`), in
            NHWC with `channels_last`, else in NCHW. Default False.
        channels_last: Compute the model's convolutions on NHWC data (channels innermost,
            PyTorch's ``channels_last``), converted by TVM's ``ConvertLayout``: the model's
            input and output keep their layout, and the weights are transposed at build time.
            A kernel can then vectorize along the output channels, which every layer has many
            of, where in NCHW it vectorizes along the width, 7 in ResNet's last stage.
            Default False.
    """

    prepack_weights: bool = False
    winograd: bool = False
    channels_last: bool = False

    def names(self) -> list[str]:
        """The names of the rewrites chosen, e.g. ``["winograd"]``."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name)]

    def check_target(self, kind: str) -> None:
        """`TensortuneError` with one line when a rewrite is chosen for a target kind other
        than llvm: their kernels were tuned and checked on CPUs only."""
        chosen = [_REWRITE_NAMES[name] for name in self.names()]
        if chosen and kind != "llvm":
            verb = "is" if len(chosen) == 1 else "are"
            raise TensortuneError(
                f"{' and '.join(chosen)} {verb} for CPU (llvm) targets, not {kind}"
            )


def model_rewrites(
    kind: str,
    prepack_weights: bool | None = None,
    winograd: bool | None = None,
    channels_last: bool | None = None,
) -> Rewrites:
    """The `Rewrites` a model is tuned with on a target of `kind` (``"llvm"``, ``"cuda"``):
    those chosen, and each left None (the default) on for llvm targets and off for others, so
    that a CPU gets packed weights and NHWC Winograd convolutions (`CPU_REWRITES`);
    `TensortuneError` with one line for a choice the target refuses."""
    cpu = kind == "llvm"
    rewrites = Rewrites(
        cpu if prepack_weights is None else prepack_weights,
        cpu if winograd is None else winograd,
        cpu if channels_last is None else channels_last,
    )
    rewrites.check_target(kind)
    return rewrites


#: The data and weight layouts of channels-last convolutions: output channels innermost in the
#: weights too (TOPI's NHWC layout), so that a kernel vectorizing along them loads contiguous
#: weights even unpacked (with `Rewrites.prepack_weights` it packs them as it likes anyway).
CHANNELS_LAST = ["NHWC", "HWIO"]
#: No rewrite: the model's functions as TVM fuses them (the default for targets other than
#: llvm, and of the functions here that take `Rewrites`).
NO_REWRITES = Rewrites()
#: Every rewrite: what `model_rewrites` chooses for a CPU (llvm) target by default. On
#: ResNet-18 on a Zen 4 with AVX-512 (2026-12-07, seeds 0-1, 1000 trials, ``studies/README.md``)
#: it made our build 1.29x ONNX Runtime's speed and 1.61x that of channels-last alone (direct
#: convolutions, unpacked weights: the default before), timed side by side.
CPU_REWRITES = Rewrites(prepack_weights=True, winograd=True, channels_last=True)
#: How errors name each of `Rewrites`' fields.
_REWRITE_NAMES = {
    "prepack_weights": "weight packing",
    "winograd": "Winograd convolution",
    "channels_last": "channels-last convolution",
}


def task_passes(target: Any, rewrites: Rewrites = NO_REWRITES) -> list[Any]:
    """The passes from a Relax model to the functions its tasks and the database key on:
    the channels-last and the Winograd rewrites if chosen (`Rewrites`, default none),
    `fusion_passes` (whose ``FoldConstant`` transposes the weights for channels-last and
    transforms them for Winograd), then the weights marked layout-free if chosen."""
    from tvm import relax

    layout = []
    if rewrites.channels_last:
        layout.append(relax.transform.ConvertLayout({"relax.nn.conv2d": CHANNELS_LAST}))
    if rewrites.winograd:
        # The rewrite takes constant weights: fold channels-last's transposes into them first.
        layout += [relax.transform.FoldConstant()] if rewrites.channels_last else []
        layout.append(conv2d_to_winograd())
    packing = [relax.transform.AttachAttrLayoutFreeBuffers()] if rewrites.prepack_weights else []
    return layout + fusion_passes(target) + packing


def extract_tasks(mod: Any, target: Any, rewrites: Rewrites = NO_REWRITES) -> list[ModelTask]:
    """The tuning tasks of Relax module `mod` on TVM target `target`, heaviest first (by
    weight, then name); `TensortuneError` with one line where TVM cannot legalize or fuse it.
    With `rewrites` (default none) they are the functions those make (`task_passes`)."""
    import tvm
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    passes = task_passes(target, rewrites)
    try:
        with target:
            fused = tvm.transform.Sequential(passes)(mod)
        extracted = ms.relax_integration.extract_tasks(fused, target)
    except Exception as err:
        raise TensortuneError(
            f"TVM cannot lower the model for {target.kind.name}: {last_line(err)}"
        ) from None
    tasks = []
    for task in extracted:
        func = task.dispatched[0]["main"]
        key = f"{tvm_ffi.structural_hash(func) & (2**64 - 1):016x}"
        tasks.append(ModelTask(str(task.task_name), key, int(task.weight), func.script()))
    return sorted(tasks, key=lambda t: (-t.weight, t.name))
