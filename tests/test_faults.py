"""A kernel that crashes, hangs, computes a wrong result or fails to compile fails only its own
trial; the study goes on and never counts it as best."""

from __future__ import annotations

import sys

import cloudpickle
import optuna
import pytest
from tvm import s_tir, te, tirx

import tensortune
from tensortune.templates import ChoiceKnob, CpuTemplate

# Workers import nothing from tests/: send this module's classes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N = 32


def _broken_program(fault: str) -> tirx.PrimFunc:
    """A kernel with matmul's signature (A, B -> C, all 32x32) that misbehaves as `fault` says."""
    a = te.placeholder((N, N), "float32", name="A")
    b = te.placeholder((N, N), "float32", name="B")
    if fault == "segfault":  # reads hundreds of MB past the end of A
        c = te.compute((N, N), lambda i, j: a[(i + 1) * 4_000_000, j] + b[i, j], name="C")
    elif fault == "hang":  # 10^12 multiply-adds
        k1 = te.reduce_axis((0, 1 << 15), name="k1")
        k2 = te.reduce_axis((0, 1 << 15), name="k2")
        c = te.compute(
            (N, N), lambda i, j: te.sum(a[i, (k1 + k2) % N] * b[k1 % N, j], axis=[k1, k2]), name="C"
        )
    elif fault == "wrong":
        k = te.reduce_axis((0, N), name="k")
        c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j] * 1.5, axis=k), name="C")
    elif fault == "compile":  # a GPU intrinsic the llvm backend cannot generate
        c = te.compute(
            (N, N),
            lambda i, j: tirx.call_intrin(
                "float32", "tirx.tvm_warp_shuffle", tirx.const(0, "uint32"), a[i, j], 0, 32, 32
            ),
            name="C",
        )
    else:
        raise AssertionError(fault)
    return te.create_prim_func([a, b, c])


class FaultyTemplate:
    """The CPU template plus a ``fault`` knob that swaps in a broken kernel."""

    faults = ("none", "segfault", "hang", "wrong", "compile")

    def __init__(self, workload):
        self.workload = workload
        self.inner = CpuTemplate(workload)
        self.fault = ChoiceKnob("fault", self.faults)

    def suggest(self, trial):
        return {**self.inner.suggest(trial), "fault": self.fault.suggest(trial)}

    def apply(self, config):
        config = dict(config)
        fault = config.pop("fault")
        if fault == "none":
            return self.inner.apply(config)
        return s_tir.Schedule(_broken_program(fault))


@pytest.mark.slow
def test_each_bad_kernel_fails_only_its_trial(storage_url):
    workload = tensortune.get_workload("matmul", N, N, N)
    settings = tensortune.MeasureSettings(repeat=2, min_repeat_ms=2, run_timeout=4.0)
    study = optuna.create_study(storage=storage_url, direction="maximize")
    order = ["none", "segfault", "none", "hang", "wrong", "compile", "none"]
    for fault in order:
        study.enqueue_trial({"fault": fault})
    template = FaultyTemplate(workload)
    with tensortune.Objective(workload, settings=settings, template=template) as objective:
        # study.optimize: the objective's NaN marks a FAIL and Optuna carries on.
        study.optimize(objective, n_trials=len(order))

    trials = sorted(study.trials, key=lambda t: t.number)
    assert len(trials) == len(order)
    stages = {"segfault": "run", "hang": "timeout", "wrong": "check", "compile": "build"}
    for trial, fault in zip(trials, order, strict=True):
        assert trial.params["fault"] == fault
        if fault == "none":
            assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs
            assert trial.user_attrs["gflops"] > 0
        else:
            assert trial.state == optuna.trial.TrialState.FAIL
            assert trial.user_attrs["failed_stage"] == stages[fault], trial.user_attrs
            assert trial.user_attrs["error"]
    assert study.best_trial.params["fault"] == "none"
    wrong = trials[order.index("wrong")].user_attrs["error"]
    assert "wrong result" in wrong and "relative error" in wrong


class ReductionVectorizingTemplate(CpuTemplate):
    """The CPU template plus a knob that, when on, vectorises a reduction loop: TVM refuses."""

    @property
    def knobs(self):
        return [*super().knobs, ChoiceKnob("vectorize_k", (False, True))]

    def _schedule(self, sch, config):
        super()._schedule(sch, config)
        if config["vectorize_k"]:
            sch.vectorize(sch.get_loops(sch.get_sblock(self.program.main))[-2])


def test_invalid_combination_fails_before_build(storage_url, fast_settings):
    workload = tensortune.get_workload("matmul", 16, 16, 16)
    template = ReductionVectorizingTemplate(workload)
    config = {k.name: k.choices[0] for k in template.knobs}
    config |= {"order": "S0 S1 S2 R0 R1 S3", "tile_k": "4x4", "vectorize_k": True}
    study = optuna.create_study(storage=storage_url, direction="maximize")
    study.enqueue_trial(config)
    study.enqueue_trial({**config, "vectorize_k": False})
    with tensortune.Objective(workload, settings=fast_settings, template=template) as objective:
        study.optimize(objective, n_trials=2)
    refused, fine = sorted(study.trials, key=lambda t: t.number)
    assert refused.state == optuna.trial.TrialState.FAIL
    assert refused.user_attrs["failed_stage"] == "invalid"
    assert refused.user_attrs["error"].startswith("invalid config:")
    assert "compile_s" not in refused.user_attrs  # never built
    assert fine.state == optuna.trial.TrialState.COMPLETE, fine.user_attrs


@pytest.mark.slow
def test_enqueued_value_outside_the_space_fails_only_its_trial(storage_url, fast_settings):
    def tune(n_trials):
        return tensortune.tune(
            "matmul",
            shape=dict(M=16, N=16, K=16),
            n_trials=n_trials,
            storage=storage_url,
            study_name="mm",
            settings=fast_settings,
            show_progress=False,
            seed=0,
            batch_size=3,
        )

    tune(1).enqueue_trial({"unroll": 7})
    study = tune(3)
    states = [t.state.name for t in sorted(study.trials, key=lambda t: t.number)]
    assert states == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    bad = study.trials[1]
    assert bad.user_attrs["failed_stage"] == "invalid"
    assert (
        "knob value outside the space" in bad.user_attrs["error"] and "7" in bad.user_attrs["error"]
    )
