"""Compile a config: schedule it with its template, then build it with TVM for a target."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tensortune.target import make_target
from tensortune.templates.weight_packing import PackedWeight, packs_weights, split_weight_packing

if TYPE_CHECKING:
    from tvm.runtime import Executable
    from tvm.s_tir import Schedule

    from tensortune.templates.template import Template


def compile_config(
    template: Template, config: Mapping[str, Any], target: dict[str, Any]
) -> tuple[Schedule, Executable, tuple[PackedWeight, ...]]:
    """`config` scheduled by `template` and compiled by ``tvm.compile`` for `target`.

    A schedule that packs weights into another layout (a model's task on a CPU, see
    `tensortune.templates.weight_packing`) is compiled split: ``main`` takes those weights
    packed, and ``prepack`` packs them, as a built model does once at build time.

    The one build path of the tuner's workers (`tensortune.measure.worker_tasks.build`), the
    export (`tensortune.export.export_best`) and the dashboard's kernel code
    (`tensortune.dashboard.kernel_sources`), so that what is exported and shown is what was
    timed.

    Args:
        template: Knobs → schedule.
        config: A value per knob.
        target: Target dict (`tensortune.target.target_spec`).

    Returns:
        The schedule (its ``mod`` is the scheduled TIR), TVM's executable (``export_library``
        writes the kernel; ``mod`` is the runtime module), and the arguments ``main`` takes
        packed (none for most kernels).

    Raises:
        ValueError: `InvalidConfig` or another `ValueError` from `Template.apply`.
        TensortuneError: If TVM rejects `target`.
    """
    import tvm

    sch = template.apply(config)
    mod, packed = sch.mod, tuple[PackedWeight, ...]()
    if packs_weights(sch.mod):
        is_input = [spec[2] for spec in template.workload.argument_specs()]
        mod, packed = split_weight_packing(sch.mod, is_input)
    return sch, tvm.compile(mod, target=make_target(target)), packed
