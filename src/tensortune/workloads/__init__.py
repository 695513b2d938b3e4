"""Workloads: operators as TVM tensor expressions, with FLOP counts and NumPy references.

Built in: ``matmul``, ``batch_matmul``, ``dense_bias_relu``, ``conv2d``, ``depthwise_conv2d``.
Register your own with `register_workload`.
"""

from tensortune.workloads import operators
from tensortune.workloads._registry import (
    Workload,
    WorkloadDef,
    get_workload,
    import_workload,
    parse_shape,
    register_workload,
    workload_definition,
    workload_names,
)
from tensortune.workloads.presets import PRESETS

__all__ = [
    "PRESETS",
    "Workload",
    "WorkloadDef",
    "get_workload",
    "import_workload",
    "operators",
    "parse_shape",
    "register_workload",
    "workload_definition",
    "workload_names",
]
