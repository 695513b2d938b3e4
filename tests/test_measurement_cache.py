"""The benchmarks' measurement cache (studies/measurement_cache.py), on real builds and timings:
a config is measured once whichever tuner proposes it, failures are kept but timeouts are
not, threads never measure one config twice, and ``tensortune tune`` never touches it."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import sys
import threading

import cloudpickle
import optuna
import pytest
from tvm import te

import tensortune
from tensortune.cli import main
from tensortune.measure import Measurer
from tensortune.target import target_spec
from tensortune.templates import ChoiceKnob, CpuTemplate, template_for
from tensortune.tuning import Objective

STUDIES = os.path.join(os.path.dirname(__file__), "..", "studies")
sys.path.insert(0, STUDIES)
try:
    import sample_efficiency
    from common import SETTINGS, workload_of
    from measurement_cache import HITS_ATTR, MISSES_ATTR, CachedMeasurer, config_key, tune_label
finally:
    sys.path.remove(STUDIES)

# Workers import nothing from tests/: send this module's classes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: The cache file the benchmarks use unless told otherwise.
DEFAULT_CACHE = os.path.normpath(os.path.join(STUDIES, "work", "measurements.db"))


class CountingMeasurer(Measurer):
    """A real `Measurer` that notes every config it is asked to measure."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.measured: list[str] = []

    def measure(self, configs):
        self.measured.extend(config_key(c) for c in configs)
        return super().measure(configs)


def cached(template, settings, path) -> CachedMeasurer:
    inner = CountingMeasurer(template, target_spec("llvm"), settings)
    return CachedMeasurer(inner, path)


def stored_rows(path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]


def configs_of(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    return {config_key(t.params): t for t in study.trials}


@pytest.mark.slow
def test_a_second_tuner_measures_only_configs_not_seen(tmp_path, storage_url):
    path = str(tmp_path / "work" / "measurements.db")
    # The benchmark's own path: tune() with the cache, its vendor baseline from the inner
    # measurer, the best kernel's code published though no result carries a library.
    study1 = sample_efficiency.run_ours("matmul-64", "random", 0, 3, storage_url, path)
    assert study1.user_attrs["vendor_gflops"] > 0
    assert (study1.user_attrs[HITS_ATTR], study1.user_attrs[MISSES_ATTR]) == (0, 3)
    seen = configs_of(study1)
    assert len(seen) == 3 and stored_rows(path) == 3

    # Another sampler, in another study, starting with two configs the first one measured.
    workload, target = workload_of("matmul-64"), target_spec("llvm")
    inner = CountingMeasurer(template_for(workload, target), target, SETTINGS)
    study2 = optuna.create_study(storage=storage_url, study_name="tpe", direction="maximize")
    repeated = [study1.trials[0].params, study1.trials[2].params]
    for params in repeated:
        study2.enqueue_trial(params)
    study2.sampler = optuna.samplers.TPESampler(seed=1)
    with CachedMeasurer(inner, path) as second, Objective(workload, measurer=second) as objective:
        study2.optimize(objective, n_trials=3)
    new = [key for key in configs_of(study2) if key not in seen]
    assert sorted(inner.measured) == sorted(new)  # only configs not seen before
    assert second.misses == len(new) and second.hits == 3 - len(new) >= 2
    for params in repeated:  # same config, same stored value and costs, for both tuners
        before, again = seen[config_key(params)], configs_of(study2)[config_key(params)]
        assert again.value == before.value
        assert again.user_attrs["costs_s"] == before.user_attrs["costs_s"]
    assert stored_rows(path) == len(seen) + len(new)


@pytest.mark.slow
def test_a_benchmark_study_resumes_to_its_trial_count(tmp_path, storage_url):
    """`tune_label` tunes until the study holds the trials asked for: called again on the same
    study it adds only what is missing."""
    path = str(tmp_path / "measurements.db")

    def tune(trials):
        sampler = optuna.samplers.RandomSampler(seed=0)
        return tune_label("matmul-64", "resumed", sampler, trials, storage_url, path)

    finished = optuna.trial.TrialState.COMPLETE
    assert len(tune(3).get_trials(states=(finished,))) == 3
    assert len(tune(3).trials) == 3  # nothing more
    assert len(tune(5).get_trials(states=(finished,))) == 5


def _hanging_kernel(n: int):
    """matmul's signature, 10^12 multiply-adds: never done within a run timeout."""
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k1 = te.reduce_axis((0, 1 << 15), name="k1")
    k2 = te.reduce_axis((0, 1 << 15), name="k2")
    c = te.compute(
        (n, n), lambda i, j: te.sum(a[i, (k1 + k2) % n] * b[k1 % n, j], axis=[k1, k2]), name="C"
    )
    return te.create_prim_func([a, b, c])


def _wrong_kernel(n: int):
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j] * 1.5, axis=k), name="C")
    return te.create_prim_func([a, b, c])


class FaultTemplate(CpuTemplate):
    """The CPU template plus a ``fault`` knob: a wrong result or a kernel that hangs."""

    @property
    def knobs(self):
        return [*super().knobs, ChoiceKnob("fault", ("none", "wrong", "hang"))]

    def apply(self, config):
        from tvm import s_tir

        fault = config["fault"]
        if fault == "none":
            return super().apply(config)
        n = self.workload.shape["M"]
        return s_tir.Schedule(_wrong_kernel(n) if fault == "wrong" else _hanging_kernel(n))


@pytest.mark.slow
def test_failures_are_cached_but_timeouts_are_not(tmp_path):
    workload = tensortune.get_workload("matmul", 32, 32, 32)
    template = FaultTemplate(workload)
    settings = tensortune.MeasureSettings(repeat=2, min_repeat_ms=2, run_timeout=2.0)
    base = {k.name: k.choices[0] for k in template.knobs}
    configs = [base, {**base, "fault": "wrong"}, {**base, "fault": "hang"}]
    path = tmp_path / "measurements.db"
    first = cached(template, settings, path)
    results = first.measure(configs)
    assert [r.stage for r in results] == [None, "check", "timeout"], results
    # A second study's cache on the same file (and, to save a start-up, the same workers).
    first.inner.measured.clear()
    with CachedMeasurer(first.inner, path) as second:
        again = second.measure(configs)
    first.close()
    assert first.inner.measured == [config_key(configs[2])]  # only the timeout again
    assert (second.hits, second.misses) == (2, 1)
    assert again[0].costs == results[0].costs and again[0].error is None
    assert (again[1].stage, again[1].error) == ("check", results[1].error)
    assert again[2].stage == "timeout"
    assert stored_rows(path) == 2


def test_a_stored_build_slower_than_the_build_timeout_reads_as_a_timeout(tmp_path, fast_settings):
    """A build stored under a long timeout would have been killed under a shorter one: it
    reads as a timeout there, measured nothing, and stays stored for the longer timeout."""
    workload = tensortune.get_workload("matmul", 32, 32, 32)
    template = CpuTemplate(workload)
    config = {k.name: k.choices[0] for k in template.knobs}
    path = tmp_path / "measurements.db"
    with cached(template, fast_settings, path) as first:
        [stored] = first.measure([config])
    assert stored.error is None and stored.compile_seconds > 0
    shorter = dataclasses.replace(fast_settings, build_timeout=stored.compile_seconds / 2)
    with cached(template, shorter, path) as second:
        [result] = second.measure([config])
        assert result.stage == "timeout" and "build timed out" in result.error
        assert (second.hits, second.misses, second.inner.measured) == (1, 0, [])
    with cached(template, fast_settings, path) as third:
        [again] = third.measure([config])
    assert again.error is None and again.costs == stored.costs


def test_threads_never_measure_a_config_twice(tmp_path, fast_settings):
    workload = tensortune.get_workload("matmul", 32, 32, 32)
    template = CpuTemplate(workload)
    knobs = {k.name: k.choices for k in template.knobs}
    one = {name: choices[0] for name, choices in knobs.items()}
    two = {**one, "tile_k": knobs["tile_k"][-1]}
    assert one != two
    barrier = threading.Barrier(4)
    outcomes: list[list] = [[] for _ in range(4)]

    def run(index: int) -> None:
        barrier.wait()
        # Each thread asks for both configs, one of them twice in its batch.
        outcomes[index] = measurer.measure([one, two, one] if index % 2 else [two, one, two])

    with cached(template, fast_settings, tmp_path / "measurements.db") as measurer:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert sorted(measurer.inner.measured) == sorted([config_key(one), config_key(two)])
        assert (measurer.hits, measurer.misses) == (10, 2)
    costs = {config_key(one): set(), config_key(two): set()}
    for index, results in enumerate(outcomes):
        batch = [one, two, one] if index % 2 else [two, one, two]
        assert len(results) == 3
        for config, result in zip(batch, results, strict=True):
            assert result.error is None and result.costs, result
            costs[config_key(config)].add(tuple(result.costs))
    assert all(len(values) == 1 for values in costs.values())  # one value per config


@pytest.mark.slow
def test_tensortune_tune_writes_no_cache(tmp_path, capsys):
    before = os.path.exists(DEFAULT_CACHE) and os.stat(DEFAULT_CACHE).st_mtime_ns
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    argv = ["tune", "matmul", "--shape", "32,32,32", "--trials", "2", "--storage", storage]
    assert main([*argv, "--repeat", "2", "--min-repeat-ms", "2", "--no-progress"]) == 0
    after = os.path.exists(DEFAULT_CACHE) and os.stat(DEFAULT_CACHE).st_mtime_ns
    assert before == after, f"tensortune tune wrote {DEFAULT_CACHE}"
    made = sorted(p.name for p in tmp_path.rglob("*") if p.suffix in (".db", ".sqlite"))
    assert made == ["cli.db"]  # the study storage only, in the working folder or below
