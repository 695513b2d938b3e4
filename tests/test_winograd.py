"""Winograd convolutions in a model: the 3x3 convolutions of stride 1 (and only those) become
Winograd tasks, whose weights are transformed at build time; the model tuned and built with
them computes what PyTorch does."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tensortune.errors import TensortuneError

torch = pytest.importorskip("torch")

from tensortune.cli import main  # noqa: E402
from tensortune.model import from_torch, tune_model  # noqa: E402
from tensortune.model.build import build, check_outputs, run  # noqa: E402
from tensortune.model.database import write_database  # noqa: E402
from tensortune.model.tasks import Rewrites, extract_tasks, task_passes  # noqa: E402
from tensortune.target import make_target, target_spec  # noqa: E402

LLVM = target_spec("llvm")


class Block(torch.nn.Module):
    """A residual block as ResNet's, small: two 3x3 convolutions of stride 1 (Winograd's), then
    a 3x3 convolution of stride 2 and a 1x1 convolution (not Winograd's)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.second = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.down = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.project = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = torch.relu(self.first(x))
        y = torch.relu(self.second(y) + y)
        return self.project(torch.relu(self.down(y)))


@pytest.fixture
def block():
    torch.manual_seed(0)
    net = Block().eval()
    example = (torch.randn(1, 8, 14, 14),)
    return from_torch(net, example, name="block"), example


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_only_3x3_convolutions_of_stride_1_become_winograd_tasks(block, channels_last):
    program, _ = block
    target = make_target(LLVM)
    direct = extract_tasks(program.mod, target, Rewrites(channels_last=channels_last))
    winograd = extract_tasks(program.mod, target, Rewrites(False, True, channels_last))
    names = [t.name for t in winograd]
    assert sum("winograd" in name for name in names) == 2, names
    assert not any("winograd" in t.name for t in direct)
    # The same number of tasks: the bias, shortcut and ReLU fuse after a Winograd convolution
    # as after a direct one, and its weight transform is folded away, not a task.
    assert len(winograd) == len(direct)
    assert {t.key for t in winograd} != {t.key for t in direct}


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_a_convolution_of_few_output_tiles_stays_direct(channels_last):
    # 13x13 is 16 tiles of 4x4 (the least the rewrite takes), 12x12 only 9; in NHWC both are
    # F(2x2)'s, which does not change what is rewritten.
    from tensortune.model.winograd import MIN_TILES

    assert MIN_TILES == 16
    target = make_target(LLVM)
    for size, expected in ((13, 2), (12, 0)):
        example = (torch.randn(1, 8, size, size),)
        program = from_torch(Block().eval(), example, name="block")
        tasks = extract_tasks(program.mod, target, Rewrites(False, True, channels_last))
        names = [t.name for t in tasks]
        assert sum("winograd" in name for name in names) == expected, (size, names)


def winograd_weight_taps(size: int, channels_last: bool) -> list[int]:
    """(m + 2)^2 of each Winograd task's F(m x m, 3x3), the leading dimensions of its weight, of
    a model of one 3x3 convolution over a `size` x `size` input, its tasks made with Winograd."""
    target = make_target(LLVM)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1)).eval()
    program = from_torch(net, (torch.randn(1, 8, size, size),), name="conv")
    tasks = extract_tasks(program.mod, target, Rewrites(False, True, channels_last))
    taps = []
    for task in (t for t in tasks if "winograd" in t.name):
        pattern = r"param_0: T\.Buffer\(\(T\.int64\((\d+)\), T\.int64\((\d+)\)"
        match = re.search(pattern, task.script)
        assert match, task.script[:400]
        taps.append(int(match[1]) * int(match[2]))
    return taps


@pytest.mark.parametrize(
    ("channels_last", "size", "taps"),
    # NHWC: F(4x4) from 32 tiles of 4x4 (21x21 and up), F(2x2) below; NCHW: F(4x4), TVM's.
    [(True, 21, 36), (True, 20, 16), (True, 14, 16), (False, 14, 36)],
    ids=["nhwc-21", "nhwc-20", "nhwc-14", "nchw-14"],
)
def test_the_tile_size_follows_how_many_tiles_each_weight_element_serves(channels_last, size, taps):
    assert winograd_weight_taps(size, channels_last) == [taps]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_partial_tiles_read_only_within_the_input_and_compute_the_convolution(channels_last):
    # 13x13 outputs are three whole 4x4 tiles (NCHW) or six whole 2x2 ones (NHWC) and a part
    # one in each direction: TVM's NCHW compute alone reads past its padded input there
    # (whatever memory follows it: 1e26 here once). The model's functions untuned, as the
    # tasks are made.
    import tvm
    from tvm import relax

    torch.manual_seed(0)
    example = (torch.randn(1, 8, 13, 13),)
    program = from_torch(Block().eval(), example, name="block")
    target = make_target(LLVM)
    passes = task_passes(target, Rewrites(winograd=True, channels_last=channels_last))
    with target:
        rewritten = tvm.transform.Sequential(passes)(program.mod)
    executable = relax.build(rewritten, target=target)
    inputs = [t.numpy() for t in example]
    error = check_outputs(run(executable, inputs), program.reference(inputs))
    assert error < 1e-4, error


def test_an_onnx_model_gets_the_same_winograd_tasks(tmp_path):
    pytest.importorskip("onnx")
    from tensortune.model import load_onnx, parse_input

    path = tmp_path / "block.onnx"
    example = (torch.randn(1, 8, 14, 14),)
    torch.onnx.export(Block().eval(), example, str(path), input_names=["x"], dynamo=False)
    onnx_program = load_onnx(str(path), [parse_input("x:1x8x14x14")])
    rewrites = Rewrites(winograd=True)
    names = [t.name for t in extract_tasks(onnx_program.mod, make_target(LLVM), rewrites)]
    assert sum("winograd" in name for name in names) == 2, names


@pytest.mark.slow
@pytest.mark.parametrize(
    ("prepack_weights", "channels_last"),
    [(False, False), (True, False), (None, None)],
    ids=["nchw", "nchw-packed", "default"],
)
def test_a_model_tuned_with_winograd_builds_and_matches_pytorch(
    block, tmp_path, prepack_weights, channels_last
):
    program, example = block
    # 16 trials in batches of 4: the scheduler's first visit gives each of the four tasks one.
    # The default on a CPU (each rewrite left None): packed NHWC Winograd.
    tuning = tune_model(
        program, 16, storage=f"sqlite:///{tmp_path / 'model.db'}", batch_size=4,
        progress=lambda line: None, winograd=None if channels_last is None else True,
        prepack_weights=prepack_weights, channels_last=channels_last,
    )  # fmt: skip
    assert tuning.rewrites == Rewrites(
        prepack_weights is not False, True, channels_last is not False
    )
    database = tmp_path / "database"
    tuned = [s for s in tuning.studies if s is not None]
    assert len(tuned) == 4 and all(s.best_trial for s in tuned)
    # Each tuned task's best, and a record for each task without knobs (NHWC's transposes).
    assert write_database(tuning.tasks, tuning.studies, tuning.target, str(database)) >= 4
    inputs = [t.numpy() for t in example]
    got = run(build(program, LLVM, str(database), tuning.rewrites), inputs)
    # Within the kernels' own tolerance of PyTorch (Winograd sums in another order).
    error = check_outputs(got, program.reference(inputs))
    assert error < 1e-3, error
    # And what TVM's untuned build of the direct convolutions computes.
    assert np.allclose(run(build(program, LLVM, None), inputs)[0], got[0], rtol=1e-3, atol=1e-4)


def test_winograd_is_refused_for_a_gpu_target(block, tmp_path, capsys):
    pytest.importorskip("onnx")
    program, _ = block
    target = json.dumps({"kind": "cuda", "arch": "sm_90"})
    db = tmp_path / "model.db"
    with pytest.raises(TensortuneError, match="Winograd convolution is for CPU"):
        tune_model(program, 4, target=target, storage=f"sqlite:///{db}", winograd=True)
    assert not db.exists()
    torch.onnx.export(
        Block().eval(), (torch.randn(1, 8, 14, 14),), str(tmp_path / "block.onnx"),
        input_names=["x"], dynamo=False,
    )  # fmt: skip
    code = main(["tune-model", str(tmp_path / "block.onnx"), "--input", "x:1x8x14x14",
                 "--trials", "4", "--target", target, "--storage", f"sqlite:///{db}",
                 "--winograd", "--prepack-weights", "-o", str(tmp_path / "out")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "weight packing and Winograd convolution are for CPU" in err[0], err
    assert not db.exists() and not (tmp_path / "out").exists()
