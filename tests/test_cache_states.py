"""MeasureSettings.cache: each cost one run, after the caches are flushed or dirtied."""

from __future__ import annotations

import dataclasses
import time

import optuna
import pytest
from optuna.trial import create_trial

import tensortune
from tensortune.cli import main
from tensortune.errors import TensortuneError
from tensortune.measure import Measurer, MeasureSettings, cache_sweep
from tensortune.target import target_spec
from tensortune.trial_records import trial_cache

CONFIG = {
    "tile_i": "2x2x4x8",
    "tile_j": "1x2x4x16",
    "tile_k": "16x8",
    "inner_axis": "j",
    "order": "S0 S1 R0 S2 R1 S3",
    "parallel": 2,
    "unroll": 64,
    "accumulate": "off",
}


@pytest.mark.parametrize("cache", ["flushed", "dirty"])
def test_cold_timing_is_one_run_per_cost_and_ignores_min_repeat_ms(cache):
    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", 128, 128, 128))
    # Warm, a cost spans at least a second; cold, a cost is one run of about 0.1 ms (and a
    # sweep of 64 MiB before it, outside the cost).
    warm = MeasureSettings(repeat=3, min_repeat_ms=1000, build_workers=1)
    cold = dataclasses.replace(warm, cache=cache)
    # Seconds outside compiling: the build's share swings with the machine's load (it made a
    # flushed measurement read 4.4 s against the warm one's 8.4 once), the timing's does not.
    timing = {}
    for name, settings in (("warm", warm), (cache, cold)):
        with Measurer(template, target_spec("llvm"), settings) as measurer:
            start = time.perf_counter()
            (result,) = measurer.measure([CONFIG])
            timing[name] = time.perf_counter() - start - result.compile_seconds
        # A misspelt or unregistered function before each run would fail here, in TVM's
        # time_evaluator.
        assert result.error is None, result.error
        assert len(result.costs) == 3 and all(c > 0 for c in result.costs)
        assert result.cache == name
    assert timing["warm"] > 3.0, timing
    assert timing[cache] < timing["warm"] - 2.0, timing


def test_the_sweep_writes_every_float_of_its_buffer_on_each_call():
    import tvm

    name = cache_sweep.dirty_caches()
    assert cache_sweep.dirty_caches() == name  # compiled once per process
    buffer = cache_sweep._SWEEP[1]
    before = buffer.numpy()
    assert before.nbytes == cache_sweep.SWEEP_MIB * 2**20
    tvm.get_global_func(name)("the timed kernel's arguments are ignored", 3)
    assert (buffer.numpy() == before + 1).all()


@pytest.mark.parametrize("cache", ["flushed", "dirty"])
def test_a_study_timed_with_cold_caches_says_so_and_resumes_only_so(storage_url, capsys, cache):
    settings = MeasureSettings(repeat=2, min_repeat_ms=0, cache=cache)
    study = tensortune.tune(
        "matmul", shape=dict(M=16, N=16, K=16), n_trials=2, storage=storage_url,
        sampler="random", seed=0, settings=settings, show_progress=False,
    )  # fmt: skip
    assert [t.user_attrs.get("cache") for t in study.trials] == [cache, cache]
    # Resumed the other way, its best would mix cold and warm costs: refused, nothing added.
    with pytest.raises(TensortuneError, match=rf"timed with {cache} caches .* --cache {cache}"):
        tensortune.tune(
            "matmul", shape=dict(M=16, N=16, K=16), n_trials=1, storage=storage_url,
            sampler="random", seed=0, show_progress=False,
        )  # fmt: skip
    other = "dirty" if cache == "flushed" else "flushed"
    for flags in ([], ["--cache", other]):
        code = main(["tune", "matmul", "--shape", "16,16,16", "--trials", "1",
                     "--storage", storage_url, "--sampler", "random", *flags])  # fmt: skip
        assert code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert len(study.trials) == len(optuna.load_study(
        study_name=study.study_name, storage=storage_url).trials) == 2  # fmt: skip
    # The same way, it resumes; --flush-cache still means --cache flushed.
    flags = ["--flush-cache"] if cache == "flushed" else ["--cache", "dirty"]
    code = main(["tune", "matmul", "--shape", "16,16,16", "--trials", "1", "--repeat", "2",
                 "--storage", storage_url, "--sampler", "random", *flags])  # fmt: skip
    assert code == 0
    again = optuna.load_study(study_name=study.study_name, storage=storage_url)
    assert [t.user_attrs.get("cache") for t in again.trials] == [cache] * 3


def test_a_trial_flagged_by_an_older_release_reads_as_flushed():
    def trial(attrs: dict) -> optuna.trial.FrozenTrial:
        return create_trial(value=1.0, user_attrs=attrs)

    assert trial_cache(trial({"cache_flushed": True})) == "flushed"
    assert trial_cache(trial({"cache": "dirty"})) == "dirty"
    assert trial_cache(trial({})) == "warm"


def test_bad_cache_states_get_one_line(capsys, storage_url):
    with pytest.raises(TensortuneError, match="unknown cache state 'cold'"):
        MeasureSettings(cache="cold")
    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", 16, 16, 16))
    device = tensortune.RpcDevice("127.0.0.1:9", "no-such-device", wait_for_device=1)
    with pytest.raises(TensortuneError, match="'dirty' times on this host only"):
        Measurer(template, target_spec("llvm"), MeasureSettings(cache="dirty"), device=device)
    command = ["tune", "matmul", "--shape", "16,16,16", "--trials", "1", "--storage", storage_url]
    with pytest.raises(SystemExit) as exited:  # argparse's own exit
        main([*command, "--cache", "cold"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'cold'" in err[0], err
    tracker = ["--rpc-tracker", "127.0.0.1:9", "--device-key", "k"]
    assert main([*command, "--cache", "dirty", *tracker]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'dirty'" in err[0], err
    assert optuna.get_all_study_names(storage=storage_url) == []
