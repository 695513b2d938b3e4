"""Channels-last convolutions in a model: every convolution becomes an NHWC task with its
weights transposed at build time, the model's input and output keep their layout, and the
model tuned and built with them computes what PyTorch does."""

from __future__ import annotations

import pytest

from tensortune.errors import TensortuneError

torch = pytest.importorskip("torch")

from tensortune.cli import main  # noqa: E402
from tensortune.model import from_torch, tune_model  # noqa: E402
from tensortune.model.build import build, check_outputs, run  # noqa: E402
from tensortune.model.database import write_database  # noqa: E402
from tensortune.model.tasks import (  # noqa: E402
    CPU_REWRITES,
    Rewrites,
    extract_tasks,
    model_rewrites,
)
from tensortune.target import make_target, target_spec  # noqa: E402

LLVM = target_spec("llvm")


class Convolutions(torch.nn.Module):
    """Three convolutions of 8 to 16 channels: a 3x3, a 3x3 of stride 2 and a 1x1."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.down = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.project = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = torch.relu(self.first(x))
        return self.project(torch.relu(self.down(y)) + 1.0)


@pytest.fixture
def convolutions():
    torch.manual_seed(0)
    net = Convolutions().eval()
    example = (torch.randn(1, 8, 10, 10),)
    return from_torch(net, example, name="convolutions"), example


def test_every_convolution_reads_channels_last_data(convolutions):
    program, _ = convolutions
    direct = extract_tasks(program.mod, make_target(LLVM))
    nhwc = extract_tasks(program.mod, make_target(LLVM), Rewrites(channels_last=True))
    convs = [t for t in nhwc if "conv2d" in t.name]
    assert len(convs) == sum("conv2d" in t.name for t in direct) == 3
    # TOPI's NHWC compute, in each (and in no task of the direct model).
    assert all("conv2d_nhwc" in t.script for t in convs), [t.script for t in convs]
    assert not any("conv2d_nhwc" in t.script for t in direct)
    # The weights' transposes are folded into constants: the only other tasks are the two
    # transposes at the model's ends.
    others = sorted(t.name for t in nhwc if "conv2d" not in t.name)
    assert len(others) == 2 and all("transpose" in name for name in others), others
    assert not {t.key for t in convs} & {t.key for t in direct}


def test_every_rewrite_is_the_default_on_cpus_only_and_each_can_be_turned_off():
    every = Rewrites(prepack_weights=True, winograd=True, channels_last=True)
    assert model_rewrites("llvm") == every == CPU_REWRITES
    assert model_rewrites("llvm", prepack_weights=False) == Rewrites(False, True, True)
    assert model_rewrites("llvm", winograd=False) == Rewrites(True, False, True)
    assert model_rewrites("llvm", channels_last=False) == Rewrites(True, True, False)
    assert model_rewrites("llvm", False, False, False) == Rewrites()
    assert model_rewrites("cuda") == Rewrites()
    with pytest.raises(TensortuneError, match="channels-last convolution is for CPU"):
        model_rewrites("cuda", channels_last=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prepack_weights", "channels_last"), [(False, None), (True, True)], ids=["default", "packed"]
)
def test_a_model_tuned_channels_last_builds_and_matches_pytorch(
    convolutions, tmp_path, prepack_weights, channels_last
):
    program, example = convolutions
    tuning = tune_model(
        program, 16, storage=f"sqlite:///{tmp_path / 'model.db'}", batch_size=4,
        progress=lambda line: None, channels_last=channels_last, prepack_weights=prepack_weights,
        winograd=False,
    )  # fmt: skip
    assert tuning.rewrites == Rewrites(prepack_weights, channels_last=True)
    database = tmp_path / "database"
    assert write_database(tuning.tasks, tuning.studies, tuning.target, str(database)) > 0
    inputs = [t.numpy() for t in example]
    got = run(build(program, LLVM, str(database), tuning.rewrites), inputs)
    assert got[0].shape == (1, 8, 5, 5)  # NCHW out, as the model's
    error = check_outputs(got, program.reference(inputs))
    assert error < 1e-4, error


def test_channels_last_for_a_gpu_is_one_line_and_writes_nothing(tmp_path, capsys):
    pytest.importorskip("onnx")
    db = tmp_path / "model.db"
    torch.onnx.export(
        Convolutions().eval(), (torch.randn(1, 8, 10, 10),), str(tmp_path / "net.onnx"),
        input_names=["x"], dynamo=False,
    )  # fmt: skip
    code = main(["tune-model", str(tmp_path / "net.onnx"), "--input", "x:1x8x10x10",
                 "--trials", "4", "--storage", f"sqlite:///{db}", "--channels-last",
                 '--target={"kind": "cuda", "arch": "sm_90"}',
                 "-o", str(tmp_path / "out")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "channels-last convolution is for CPU" in err[0], err
    assert not db.exists() and not (tmp_path / "out").exists()
