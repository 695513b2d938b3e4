"""MeasureSettings.flush_cache: each cost one run with the weights evicted from the caches."""

from __future__ import annotations

import dataclasses
import time

import optuna
import pytest

import tensortune
from tensortune.cli import main
from tensortune.errors import TensortuneError
from tensortune.measure import Measurer, MeasureSettings
from tensortune.target import target_spec


def test_flushed_timing_is_one_run_per_cost_and_ignores_min_repeat_ms():
    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", 128, 128, 128))
    config = {
        "tile_i": "2x2x4x8",
        "tile_j": "1x2x4x16",
        "tile_k": "16x8",
        "inner_axis": "j",
        "order": "S0 S1 R0 S2 R1 S3",
        "parallel": 2,
        "unroll": 64,
        "accumulate": "off",
    }
    # Warm, a cost spans at least a second; flushed, a cost is one run of about 0.1 ms.
    warm = MeasureSettings(repeat=3, min_repeat_ms=1000, build_workers=1)
    flushed = dataclasses.replace(warm, flush_cache=True)
    # Seconds outside compiling: the build's share swings with the machine's load (it made a
    # flushed measurement read 4.4 s against the warm one's 8.4 once), the timing's does not.
    timing = {}
    for name, settings in (("warm", warm), ("flushed", flushed)):
        with Measurer(template, target_spec("llvm"), settings) as measurer:
            start = time.perf_counter()
            (result,) = measurer.measure([config])
            timing[name] = time.perf_counter() - start - result.compile_seconds
        # A misspelt flush function would fail here, in TVM's time_evaluator.
        assert result.error is None, result.error
        assert len(result.costs) == 3 and all(c > 0 for c in result.costs)
        assert result.cache_flushed == (name == "flushed")
    assert timing["warm"] > 3.0, timing
    assert timing["flushed"] < timing["warm"] - 2.0, timing


def test_a_study_timed_with_flushed_caches_says_so_and_resumes_only_so(storage_url, capsys):
    settings = MeasureSettings(repeat=2, min_repeat_ms=0, flush_cache=True)
    study = tensortune.tune(
        "matmul", shape=dict(M=16, N=16, K=16), n_trials=2, storage=storage_url,
        sampler="random", seed=0, settings=settings, show_progress=False,
    )  # fmt: skip
    assert [t.user_attrs.get("cache_flushed") for t in study.trials] == [True, True]
    # Resumed the other way, its best would mix cold and warm costs: refused, nothing added.
    with pytest.raises(TensortuneError, match=r"timed with flushed caches .* resume it with"):
        tensortune.tune(
            "matmul", shape=dict(M=16, N=16, K=16), n_trials=1, storage=storage_url,
            sampler="random", seed=0, show_progress=False,
        )  # fmt: skip
    code = main(["tune", "matmul", "--shape", "16,16,16", "--trials", "1",
                 "--storage", storage_url, "--sampler", "random"])  # fmt: skip
    assert code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert len(study.trials) == len(optuna.load_study(
        study_name=study.study_name, storage=storage_url).trials) == 2  # fmt: skip
    # The same way, it resumes.
    again = tensortune.tune(
        "matmul", shape=dict(M=16, N=16, K=16), n_trials=1, storage=storage_url,
        sampler="random", seed=0, settings=settings, show_progress=False,
    )  # fmt: skip
    assert [t.user_attrs.get("cache_flushed") for t in again.trials] == [True] * 3
