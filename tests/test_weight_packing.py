"""Weight packing: a model's kernels may read its weights in a layout of their own, packed once
at build time. A task extracted with packing gets MetaSchedule's packing block on a CPU; the
kernel is compiled split (``main`` reads the packed weight, ``prepack`` packs it), checked and
timed that way, and the model built with such kernels computes what the framework does."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tensortune.errors import TensortuneError
from tensortune.export import export_best, load_kernel
from tensortune.measure import Measurer, MeasureSettings, worker_tasks
from tensortune.templates.compile import compile_config
from tensortune.templates.metaschedule import MetaScheduleTemplate
from tensortune.templates.weight_packing import PREPACK, PackedWeight, packs_weights

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from tensortune.cli import main  # noqa: E402
from tensortune.model import load_onnx, parse_input, tune_model  # noqa: E402
from tensortune.model.export import MANIFEST, export_model  # noqa: E402
from tensortune.model.tasks import Rewrites, extract_tasks  # noqa: E402
from tensortune.target import make_target, target_spec  # noqa: E402

LLVM = target_spec("llvm")


class Dense(torch.nn.Module):
    """One linear layer: a matmul whose weight is a constant of the model."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(64, 96)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return torch.relu(self.fc(x))


@pytest.fixture
def onnx_file(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "dense.onnx"
    torch.onnx.export(
        Dense().eval(), (torch.randn(16, 64),), str(path), input_names=["x"], dynamo=False
    )
    return str(path)


def _matmul_task(onnx_file, prepack_weights=True):
    program = load_onnx(onnx_file, [parse_input("x:16x64")])
    tasks = extract_tasks(program.mod, make_target(LLVM), Rewrites(prepack_weights))
    return next(t for t in tasks if "matmul" in t.name)


def _packing_configs(template, count=3, seed=0):
    """`count` configs of `template` whose schedule packs a weight (most do)."""
    rng, found = random.Random(seed), []
    for _ in range(200):
        config = {k.name: rng.choice(k.choices) for k in template.knobs}
        try:
            if packs_weights(template.apply(config).mod):
                found.append(config)
        except ValueError:  # a config the postprocessors reject
            continue
        if len(found) == count:
            return found
    raise AssertionError("no config of the task packs its weight")


def test_a_packing_kernel_is_compiled_split_and_computes_the_task(onnx_file):
    task = _matmul_task(onnx_file)
    assert "layout_free_buffers" in task.script
    # Without packing the same function is another task.
    assert _matmul_task(onnx_file, prepack_weights=False).key != task.key
    workload = task.workload()
    template = MetaScheduleTemplate(workload, LLVM)
    inputs = workload.random_inputs(seed=0)
    (expected,) = workload.reference(inputs)
    import tvm

    for config in _packing_configs(template):
        _, executable, packed = compile_config(template, config, LLVM)
        assert packed and all(inputs[w.index].size == np.prod(w.shape) for w in packed)
        assert any(inputs[w.index].shape != w.shape for w in packed)
        args = [tvm.runtime.tensor(a) for a in inputs]
        layouts = [tvm.runtime.empty(w.shape, "float32", tvm.cpu()) for w in packed]
        # One call packs them all: the originals in `packed`'s order, then their layouts.
        executable.mod[PREPACK](*(args[w.index] for w in packed), *layouts)
        for weight, layout in zip(packed, layouts, strict=True):
            args[weight.index] = layout
        out = tvm.runtime.tensor(np.full(expected.shape, np.nan, "float32"))
        executable.mod["main"](*args, out)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_the_measurer_times_a_packing_kernel_with_its_weight_packed_once(onnx_file, tmp_path):
    task = _matmul_task(onnx_file)
    template = MetaScheduleTemplate(task.workload(), LLVM)
    configs = _packing_configs(template, count=2, seed=1)
    settings = MeasureSettings(number=2, repeat=2, min_repeat_ms=0)
    with Measurer(template, LLVM, settings) as measurer:
        results = measurer.measure(configs)
    for result in results:
        assert result.error is None, result.error
        assert result.packed and len(result.costs) == 2
    # The check sees the packing: the same kernel given the weight unpacked fails it or is
    # refused, so a kernel that skipped the packing could not pass.
    path = str(tmp_path / "kernel.so")
    _, packed = worker_tasks.build(template, configs[0], LLVM, path)
    assert packed == results[0].packed
    try:
        outcome = worker_tasks.run(path, task.workload(), settings, "llvm", packed=())
    except Exception as err:  # TVM refuses the unpacked shape
        outcome = str(err)
    assert isinstance(outcome, str)
    assert isinstance(worker_tasks.run(path, task.workload(), settings, "llvm", packed), list)


@pytest.mark.slow
def test_a_model_tuned_with_packed_weights_builds_and_matches_the_framework(onnx_file, tmp_path):
    program = load_onnx(onnx_file, [parse_input("x:16x64")])
    storage = f"sqlite:///{tmp_path / 'model.db'}"
    tuning = tune_model(
        program, 8, storage=storage, batch_size=4, progress=lambda line: None,
        prepack_weights=True,
    )  # fmt: skip
    assert tuning.rewrites.prepack_weights
    assert all("layout_free_buffers" in t.script for t in tuning.tasks if "matmul" in t.name)
    # The build packs the weights and checks the outputs against ONNX Runtime's (or TVM's
    # untuned build); a mismatch would raise.
    report = export_model(tuning, str(tmp_path / "out"))
    assert report.tuned_kernels >= 1
    with open(tmp_path / "out" / MANIFEST) as f:
        assert json.load(f)["prepack_weights"] is True
    # The task's kernel exported alone packs its weights on each call, and computes the task.
    study = next(s for t, s in zip(tuning.tasks, tuning.studies, strict=True) if "matmul" in t.name)
    kernel = load_kernel(export_best(study, str(tmp_path / "kernel")))
    template = MetaScheduleTemplate(kernel.workload, LLVM)
    _, _, packed = compile_config(template, kernel.config, LLVM)
    written = kernel.manifest["packed_weights"]
    assert packed and [PackedWeight(w["index"], tuple(w["shape"])) for w in written] == list(packed)
    kernel.check()


def test_weight_packing_is_refused_for_a_gpu_target(onnx_file, tmp_path, capsys):
    target = json.dumps({"kind": "cuda", "arch": "sm_90"})
    db = tmp_path / "model.db"
    code = main(["tune-model", onnx_file, "--input", "x:16x64", "--trials", "4",
                 "--target", target, "--storage", f"sqlite:///{db}", "--prepack-weights",
                 "-o", str(tmp_path / "out")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "weight packing is for CPU" in err[0], err
    assert not db.exists() and not (tmp_path / "out").exists()
    with pytest.raises(TensortuneError, match="weight packing"):
        tune_model(load_onnx(onnx_file, [parse_input("x:16x64")]), 4, target=target,
                   storage=f"sqlite:///{db}", prepack_weights=True)  # fmt: skip
