"""Vendor baselines (tensortune.measure.baseline): PyTorch's library kernel for every CPU
operator, NumPy's BLAS when PyTorch is missing, readings that agree with each other, and the
timing worker's path (a worker that imported TVM with PyTorch hidden still gets PyTorch)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest

import tensortune
from tensortune.measure import Measurer
from tensortune.measure.baseline import REPEAT_FACTOR, vendor_kernels, vendor_time
from tensortune.target import target_spec

torch = pytest.importorskip("torch")

VERSION = torch.__version__.split("+")[0]
BLAS = f"torch-{VERSION}/{'mkl' if torch.backends.mkl.is_available() else 'native'}"
CONV = f"torch-{VERSION}/{'onednn' if torch.backends.mkldnn.is_available() else 'native'}"

#: One small shape of every CPU operator, with the library its vendor must name.
OPERATORS = [
    ("matmul", dict(M=64, N=96, K=80), BLAS),
    ("batch_matmul", dict(B=4, M=32, N=48, K=16), BLAS),
    ("dense_bias_relu", dict(M=16, N=64, K=32), BLAS),
    ("conv2d", dict(N=1, C=8, H=8, W=8, OC=16, KH=3, KW=3, stride=1, pad=1), CONV),
    ("depthwise_conv2d", dict(N=1, C=16, H=8, W=8, KH=3, KW=3, stride=2, pad=1), CONV),
]


def gflops(workload: tensortune.Workload, costs: list[float]) -> float:
    costs = sorted(costs)
    return workload.flop_count / costs[len(costs) // 2] / 1e9


@pytest.mark.parametrize(("op", "shape", "library"), OPERATORS, ids=[o[0] for o in OPERATORS])
def test_every_cpu_operator_has_a_torch_vendor(op, shape, library):
    workload = tensortune.get_workload(op, **shape)
    assert library in {name for name, _ in vendor_kernels(workload)}
    threads = torch.get_num_threads()
    # Twice the costs a candidate records, each as long.
    found = vendor_time(workload, repeat=3, min_repeat_ms=1, threads=1, library=library)
    assert found is not None
    name, costs = found
    assert name == library
    assert len(costs) == REPEAT_FACTOR * 3
    assert all(math.isfinite(c) and c > 0 for c in costs)
    assert 0 < gflops(workload, costs) < 1e5
    assert torch.get_num_threads() == threads  # restored


def test_the_faster_library_is_the_vendor_of_the_matmul_family():
    workload = tensortune.get_workload("matmul", M=64, N=64, K=64)
    libraries = [name for name, _ in vendor_kernels(workload)]
    assert libraries[0] == BLAS and libraries[1].startswith("numpy-")
    found = vendor_time(workload, 1, 1, 2)
    assert found is not None and found[0] in libraries
    assert vendor_time(workload, 1, 1, 2, library="numpy-0.0/none") is None  # not installed


def test_readings_of_one_vendor_agree():
    # Not a speed assertion: three readings of one kernel must be of one magnitude.
    workload = tensortune.get_workload("matmul", M=256, N=256, K=256)
    readings = []
    for _ in range(3):
        found = vendor_time(workload, 3, 30, os.cpu_count() or 1, library=BLAS)
        assert found is not None
        readings.append(gflops(workload, found[1]))
    assert max(readings) / min(readings) < 3, readings


def test_numpy_is_the_fallback_without_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # as if PyTorch were not installed
        import numpy as np
        import tensortune
        from tensortune.measure.baseline import vendor_time
        mm = tensortune.get_workload("matmul", M=64, N=64, K=64)
        name, costs = vendor_time(mm, 1, 1, 2)
        conv = tensortune.get_workload(
            "conv2d", N=1, C=4, H=8, W=8, OC=4, KH=3, KW=3, stride=1, pad=1)
        print(name, min(costs) > 0, vendor_time(conv, 1, 1, 2), np.__version__)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    name, positive, conv, version = done.stdout.split()
    assert name.startswith(f"numpy-{version}")
    assert positive == "True"
    assert conv == "None"  # no convolution in NumPy: no vendor rather than a slow stand-in


@pytest.mark.slow
def test_measurer_times_torch_in_its_worker_after_kernels(fast_settings):
    # The run worker imported TVM with PyTorch hidden; the vendor task must still get PyTorch,
    # also after the worker timed a kernel (it is then timed in a fresh worker).
    op, shape, _ = OPERATORS[3]
    template = tensortune.CpuTemplate(tensortune.get_workload(op, **shape))
    config = {knob.name: knob.choices[0] for knob in template.knobs}
    with Measurer(template, target_spec("llvm"), fast_settings) as measurer:
        (result,) = measurer.measure([config])
        assert result.error is None
        found = measurer.vendor_baseline()
        assert found is not None
        name, seconds = found
        assert name == CONV
        assert math.isfinite(seconds) and seconds > 0
        (again,) = measurer.measure([config])  # the worker still times
        assert again.error is None


@pytest.mark.slow
def test_retime_times_the_tuning_vendor_in_the_same_rounds(fast_settings):
    studies = os.path.join(os.path.dirname(__file__), "..", "studies")
    sys.path.insert(0, studies)
    try:
        from common import VENDOR, retime
    finally:
        sys.path.remove(studies)
    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", M=64, N=64, K=64))
    config = {knob.name: knob.choices[0] for knob in template.knobs}
    kernels = {"ours": (template, config)}
    seconds = retime(kernels, target_spec("llvm"), fast_settings, 2, BLAS)
    assert set(seconds) == {"ours", VENDOR}
    assert math.isfinite(seconds[VENDOR]) and seconds[VENDOR] > 0
    # A library the tuning had but this machine has not: no vendor rather than another one.
    seconds = retime(kernels, target_spec("llvm"), fast_settings, 1, "numpy-0.0/none")
    assert set(seconds) == {"ours"}
