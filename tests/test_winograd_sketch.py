"""Our fused design spaces of the NHWC Winograd convolution: offered beside MetaSchedule's for
that task only, their configs compute the convolution (kernel alone and in the built model),
and configs stored before them still apply and still train the learned sampler."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

torch = pytest.importorskip("torch")

from tensortune.finalists import Pick  # noqa: E402
from tensortune.measure import Measurer, MeasureSettings  # noqa: E402
from tensortune.model import from_torch  # noqa: E402
from tensortune.model.build import build, check_outputs, run  # noqa: E402
from tensortune.model.database import RECORDS_FILE, WORKLOADS_FILE, write_database  # noqa: E402
from tensortune.model.tasks import Rewrites, extract_tasks  # noqa: E402
from tensortune.sampler.history import KnobSpace  # noqa: E402
from tensortune.target import make_target, target_spec  # noqa: E402
from tensortune.templates import metaschedule as ms_space  # noqa: E402
from tensortune.templates.metaschedule import MetaScheduleTemplate  # noqa: E402
from tensortune.templates.winograd_sketch import tile_blocks  # noqa: E402

LLVM = target_spec("llvm")
#: The default rewrites on a CPU: packed NHWC Winograd.
DEFAULT = Rewrites(prepack_weights=True, winograd=True, channels_last=True)


class Convolutions(torch.nn.Module):
    """Two 3x3 convolutions of stride 1 (Winograd's: F(2x2) at 14x14, F(4x4) at 24x24, 6
    tiles across), the second with a shortcut, then a 1x1 one (direct)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.second = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.project = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = torch.relu(self.first(x))
        y = torch.relu(self.second(y) + y)
        return self.project(y)


def _program(size: int):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    example = (torch.randn(1, 8, size, size),)
    return from_torch(Convolutions().eval(), example, name="convolutions"), example


def _tasks(program, rewrites=DEFAULT):  # type: ignore[no-untyped-def]
    return extract_tasks(program.mod, make_target(LLVM), rewrites)


def _fused_config(template: MetaScheduleTemplate, fused: int) -> dict:
    """A config of our `fused`-th design space: its knobs at their last choices."""
    chosen = {d.knob for d in template.decisions[template.sketch_of({ms_space.FUSED: fused})]}
    config = {k.name: k.choices[-1] for k in template.knobs if k.name in chosen}
    return template.check({**config, ms_space.FUSED: fused})


def test_blocks_are_a_row_of_tiles_or_a_part_that_divides_it():
    # ResNet-18's Winograd layers: 56x56 and 28x28 in F(4x4), 14x14 in F(2x2).
    assert tile_blocks(56, 56, 4) == [14, 7]
    assert tile_blocks(28, 28, 4) == [7]
    assert tile_blocks(14, 14, 2) == [7]
    assert tile_blocks(16, 16, 2) == [8, 4]
    assert tile_blocks(13, 13, 2) == [7]


@pytest.mark.parametrize("size", [14, 24], ids=["f2x2", "f4x4"])
def test_only_nhwc_winograd_tasks_get_our_design_spaces(size):
    program, _ = _program(size)
    for task in _tasks(program):
        template = MetaScheduleTemplate(task.workload(), LLVM)
        knobs = {k.name: k.choices for k in template.knobs}
        if "winograd" in task.name:
            # MetaSchedule's sketches keep their knob; ours are picked by another.
            assert knobs[ms_space.FUSED] == (0, 1), task.name
            theirs = len(template.decisions) - template.own_sketches
            assert len(knobs.get(ms_space.SKETCH, (0,))) == theirs
        else:
            assert ms_space.FUSED not in knobs, task.name
    # NCHW's Winograd (TVM's own compute) has none, nor an output of partial tiles (13x13 in
    # tiles of 2x2).
    partial, _ = _program(13)
    for task in [*_tasks(program, Rewrites(winograd=True)), *_tasks(partial)]:
        template = MetaScheduleTemplate(task.workload(), LLVM)
        assert ms_space.FUSED not in {k.name for k in template.knobs}, task.name


@pytest.mark.parametrize("size", [14, 24], ids=["f2x2", "f4x4"])
def test_a_fused_kernel_computes_the_convolution(size):
    program, _ = _program(size)
    for task in [t for t in _tasks(program) if "winograd" in t.name]:
        template = MetaScheduleTemplate(task.workload(), LLVM)
        config = _fused_config(template, 1)
        schedule = template.apply(config)
        blocks = [b for b in ("data_pack", "bgemm", "inverse") if b in schedule.mod.script()]
        assert blocks == ["data_pack", "bgemm", "inverse"]
        # One parallel loop: the stages run per block of tiles inside it.
        assert schedule.mod.script().count("T.parallel(") == 1
        settings = MeasureSettings(repeat=1, min_repeat_ms=0)
        with Measurer(template, LLVM, settings) as measurer:
            (result,) = measurer.measure([config])
        # The measurer checks the output against the unscheduled function's.
        assert result.error is None and result.costs, result.error


def test_a_model_built_with_fused_kernels_matches_pytorch(tmp_path):
    program, example = _program(24)
    tasks = _tasks(program)
    picks = []
    for task in tasks:
        template = MetaScheduleTemplate(task.workload(), LLVM)
        fused = "winograd" in task.name
        picks.append(Pick(_fused_config(template, 1), 1e-3, 0, ()) if fused else None)
    assert sum(p is not None for p in picks) == 2
    database = str(tmp_path / "database")
    written = write_database(tasks, [None] * len(tasks), LLVM, database, picks)
    assert written >= 2
    # What the build finds for each Winograd task is the fused kernel, replayed from its trace.
    records = ms.database.JSONDatabase(
        path_workload=os.path.join(database, WORKLOADS_FILE),
        path_tuning_record=os.path.join(database, RECORDS_FILE),
    )
    for task in [t for t in tasks if "winograd" in t.name]:
        mod = tvm.IRModule({"main": task.workload().prim_func()})
        found = records.query_schedule(mod, make_target(LLVM), workload_name="main")
        assert found is not None and found.mod.script().count("T.parallel(") == 1, task.name
    inputs = [t.numpy() for t in example]
    got = run(build(program, LLVM, database, DEFAULT), inputs)
    error = check_outputs(got, program.reference(inputs))
    assert error < 1e-3, error
    untuned = run(build(program, LLVM, None), inputs)
    assert np.allclose(untuned[0], got[0], rtol=1e-3, atol=1e-4)


def test_a_config_stored_before_our_design_spaces_still_applies():
    program, _ = _program(14)
    task = next(t for t in _tasks(program) if "winograd" in t.name)
    template = MetaScheduleTemplate(task.workload(), LLVM)
    ours = {d.knob for d in template.decisions[template.sketch_of({ms_space.FUSED: 1})]}
    theirs = {d.knob for d in template.decisions[0]}
    stored = {k.name: k.choices[0] for k in template.knobs if k.name in theirs}
    stored[ms_space.SKETCH] = 0
    checked = template.check(stored)
    assert checked[ms_space.FUSED] == 0 and ours <= set(checked)
    assert template.apply(stored).mod.script() == template.apply(checked).mod.script()
    # The learned sampler reads such a trial as that config, not as one outside its space.
    space = KnobSpace(template.knobs, template.check)
    assert space.encode(stored) == space.encode(checked) is not None
    assert KnobSpace(template.knobs).encode(stored) is None
    # A knob MetaSchedule's sketch reads is still required.
    missing = next(iter(theirs - ours))
    with pytest.raises(ValueError, match="has no value for knob"):
        template.check({k: v for k, v in stored.items() if k != missing})
