"""Workloads: each operator's unscheduled TVM program matches its NumPy reference; shapes are
checked; users can register their own."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

import tensortune
from tensortune import TensortuneError
from tensortune.workloads import get_workload, parse_shape

SMALL = {
    "matmul": dict(M=8, N=12, K=16),
    "batch_matmul": dict(B=2, M=8, N=4, K=6),
    "dense_bias_relu": dict(M=4, N=8, K=16),
    "conv2d": dict(N=1, C=3, H=9, W=9, OC=4, KH=3, KW=3, stride=2, pad=1),
    "depthwise_conv2d": dict(N=1, C=4, H=8, W=8, KH=3, KW=3, stride=1, pad=1),
}


def run_default_schedule(workload, inputs):
    """Compile the program exactly as written (no template) and run it."""
    lib = tvm.compile(workload.prim_func(), target="llvm")
    dev = tvm.cpu(0)
    specs = [s for s in workload.argument_specs() if not s[2]]
    outs = [tvm.runtime.tensor(np.zeros(shape, dtype), dev) for shape, dtype, _ in specs]
    lib["main"](*[tvm.runtime.tensor(a, dev) for a in inputs], *outs)
    return [o.numpy() for o in outs]


@pytest.mark.parametrize("name", sorted(SMALL))
def test_program_matches_numpy_reference(name):
    workload = get_workload(name, **SMALL[name])
    inputs = workload.random_inputs(seed=3)
    (got,) = run_default_schedule(workload, inputs)
    (want,) = workload.reference(inputs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.abs(want).max() > 0.1  # the check compares real values, not zeros


def test_references_against_independent_formulas():
    conv = get_workload("conv2d", N=1, C=2, H=5, W=5, OC=3, KH=3, KW=3, stride=1, pad=0)
    data, weight = conv.random_inputs(seed=1)
    (out,) = conv.reference([data, weight])
    direct = sum(
        data[0, c, 1 + dy, 2 + dx] * weight[1, c, dy, dx]
        for c in range(2)
        for dy in range(3)
        for dx in range(3)
    )
    assert out[0, 1, 1, 2] == pytest.approx(direct, rel=1e-6)
    dense = get_workload("dense_bias_relu", M=3, N=4, K=5)
    x, w, b = dense.random_inputs(seed=2)
    (out,) = dense.reference([x, w, b])
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), rtol=1e-5)
    assert (out == 0).any() and (out > 0).any()


def test_flop_counts():
    assert get_workload("matmul", 1024, 1024, 1024).flop_count == 2 * 1024**3
    c7 = parse_shape("conv2d", "resnet18-c7")
    assert c7.flop_count == pytest.approx(0.1156e9, rel=1e-3)  # 2*OC*OH*OW*C*KH*KW
    assert get_workload("depthwise_conv2d", 1, 4, 8, 8).flop_count == 2 * 4 * 8 * 8 * 9


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("matmul", "0,4,4", "M must be positive"),
        ("matmul", "-3,4,4", "M must be positive"),
        ("matmul", "4,4", "needs a value for K"),
        ("matmul", "4,4,4,4", "takes 3 shape values"),
        ("matmul", "4,x,4", "not an integer"),
        ("matmul", "M=4,N=4,Q=4", "no shape parameter 'Q'"),
        ("matmul", "4,,4", "empty value"),
        ("conv2d", "1,3,5,5,4,7,7,1,0", "does not fit"),
        ("conv2d", "1,3,5,5,4,3,3,0,1", "stride must be positive"),
        ("conv2d", "1,3,5,5,4,3,3,1,-1", "pad must not be negative"),
        ("conv2d", "resnet18-zz", "not an integer"),
        ("matmul", "resnet18-c7", "is for conv2d"),
        ("nosuchop", "1,2", "unknown workload 'nosuchop'"),
    ],
)
def test_bad_shapes_are_refused(name, text, message):
    with pytest.raises(TensortuneError, match=message):
        parse_shape(name, text)


@pytest.mark.slow
def test_register_a_workload_and_tune_it(storage_url, fast_settings):
    @tensortune.register_workload(
        "scale_add", reference=lambda x, y: 2 * x + y, flops=lambda n: 2 * n, overwrite=True
    )
    def scale_add(n: int = 64):
        x = te.placeholder((n,), "float32", name="x")
        y = te.placeholder((n,), "float32", name="y")
        return [x, y, te.compute((n,), lambda i: 2 * x[i] + y[i], name="out")]

    workload = get_workload("scale_add", n=256)
    assert workload.key == "scale_add(n=256)"
    with pytest.raises(TensortuneError, match="already registered"):
        tensortune.register_workload("scale_add", reference=lambda x, y: x)(scale_add)
    # The workload is defined in this test module: workers receive it by value.
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    study = tensortune.tune(
        workload,
        n_trials=3,
        storage=storage_url,
        settings=fast_settings,
        seed=0,
        batch_size=3,
        show_progress=False,
    )
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert all(t.user_attrs["gflops"] > 0 for t in study.trials)
