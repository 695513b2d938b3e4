"""What the scripts in this folder share, so that none imports another: the reference workloads
(one name each), the settings and storage conventions of the tuning studies, one re-timing of
winners, trials to a level, and the recorded-measurement datasets of the cost-model studies.

Reading and writing results (CSV, curves, plots) is in ``results_io.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

import numpy as np
import optuna

import tensortune
from tensortune.finalists import best_distinct, round_orders
from tensortune.measure import Measurer, MeasureSettings
from tensortune.workloads import PRESETS, Workload

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

# -- the reference workloads ---------------------------------------------------------------------
#: Label → (operator, shape) of the workloads the studies tune; labels are
#: `tensortune.workloads.PRESETS` names where one exists.
WORKLOADS: dict[str, tuple[str, dict[str, int]]] = {
    "matmul-1024": ("matmul", dict(M=1024, N=1024, K=1024)),
    **{
        label: PRESETS[label]
        for label in (
            "bert-attention",
            "bert-ffn",
            "resnet18-c2",
            "resnet18-c7",
            "resnet18-c12",
            "mobilenet-dw",
        )
    },
}
#: Shapes the sampler's defaults were not chosen on, with awkward factors, to check that they
#: hold elsewhere (issue 19): a matmul with factors 7 and 5^2, an Inception-like conv2d on a
#: 35x35 map, and ViT-B/16's attention scores (197 tokens, a prime).
UNSEEN_WORKLOADS: dict[str, tuple[str, dict[str, int]]] = {
    "matmul-odd": ("matmul", dict(M=1000, N=700, K=600)),
    "conv2d-odd": ("conv2d", dict(N=1, C=96, H=35, W=35, OC=160, KH=3, KW=3, stride=1, pad=1)),
    "vit-attention": ("batch_matmul", dict(B=12, M=197, N=197, K=64)),
}
#: Small stand-ins for the --quick modes.
QUICK_WORKLOADS: dict[str, tuple[str, dict[str, int]]] = {
    "matmul-64": ("matmul", dict(M=64, N=64, K=64)),
    "matmul-128": ("matmul", dict(M=128, N=128, K=128)),
    "matmul-192x96x160": ("matmul", dict(M=192, N=96, K=160)),
    "conv2d-small": ("conv2d", dict(N=1, C=8, H=8, W=8, OC=16, KH=3, KW=3, stride=1, pad=1)),
}
#: The names the CPU template studies (template_ceiling.py, hand_configs.py,
#: sampler_overhead.py) write for the ResNet-18 layers in their results, kept so that those
#: files read the same as before: the workloads are `WORKLOADS`' ``resnet18-c7``/``-c12``.
CONV_LABELS = {"resnet18-c7": "conv2d-c7", "resnet18-c12": "conv2d-c12"}


#: Every workload label the scripts know, in the order results are written.
ALL_WORKLOADS = WORKLOADS | UNSEEN_WORKLOADS | QUICK_WORKLOADS


def workload_of(label: str) -> Workload:
    """The workload a label of `ALL_WORKLOADS` names."""
    op, shape = ALL_WORKLOADS[label]
    return tensortune.get_workload(op, **shape)


def case(label: str) -> tuple[str, str, dict[str, int]]:
    """(results label, operator, shape) of a workload label, for the scripts that write
    `CONV_LABELS`' names."""
    op, shape = ALL_WORKLOADS[label]
    return CONV_LABELS.get(label, label), op, shape


# -- tuning studies: settings and storage conventions -------------------------------------------
#: Three timed costs of at least 30 ms each: enough to rank kernels while keeping a trial near
#: one second. The re-timing of the winners uses more.
SETTINGS = MeasureSettings(repeat=3, min_repeat_ms=30)
#: User attr a study gets once it finished: its wall seconds.
DONE = "bench:wall_s"


def study_name(label: str, tuner: str, seed: int, trials: int) -> str:
    """The name of a sample-efficiency study; transfer.py finds its sources by it."""
    return f"{label}/{tuner}/s{seed}/n{trials}"


# -- transfer.py's pairs and study names (read by judge_taus.py as well) ------------------------
#: ``transfer.py``'s pairs: pair → (target label, source labels, whether to run the enqueue
#: baseline).
TRANSFER_PAIRS = {
    "c12-to-c7": ("resnet18-c7", ("resnet18-c12",), True),
    "loo-c2": ("resnet18-c2", ("resnet18-c7", "resnet18-c12"), True),
    "loo-c7": ("resnet18-c7", ("resnet18-c2", "resnet18-c12"), False),
    "loo-c12": ("resnet18-c12", ("resnet18-c2", "resnet18-c7"), True),
    "matmul-to-batch_matmul": ("bert-attention", ("matmul-1024", "bert-ffn"), False),
    "conv2d-to-depthwise": ("mobilenet-dw", ("resnet18-c2", "resnet18-c7", "resnet18-c12"), False),
    "depthwise-to-matmul": ("matmul-1024", ("mobilenet-dw",), False),
}
#: Trials of a transfer target study unless ``--trials`` says otherwise.
TRANSFER_TRIALS = 64
#: The sources: ``sample_efficiency.py``'s learned-sampler studies of this many trials.
SOURCE_TRIALS = 64
#: The seeds of each source workload's studies.
SOURCE_SEEDS = (0, 1, 2)


def transfer_study_name(
    pair: str,
    target: str,
    mode: str,
    seed: int,
    trials: int,
    cost_model: str = "xgb",
    source_trials: int = SOURCE_TRIALS,
) -> str:
    """The name of `target`'s study in `mode` for the transfer `pair`, of `trials` trials, with
    `cost_model` (default "xgb") and sources of `source_trials` trials (default
    `SOURCE_TRIALS`); see ``transfer.py``'s ``run_target``."""
    # Cold studies depend on the target only: pairs with one target share them.
    name = f"{target}/cold/s{seed}" if mode == "cold" else f"{pair}/{mode}/s{seed}"
    if cost_model != "xgb":
        name = f"{cost_model}:{name}"
    if trials != TRANSFER_TRIALS:  # a finished study of another length is not this one
        name += f"/n{trials}"
    if mode != "cold" and source_trials != SOURCE_TRIALS:  # nor one from other sources
        name += f"/src{source_trials}"
    return name


def finished(storage: str, name: str) -> optuna.Study | None:
    """The study `name` if it finished; an unfinished one (an interrupted run) is deleted so
    that it runs again from scratch."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    if DONE in study.user_attrs:
        return study
    optuna.delete_study(study_name=name, storage=storage)
    return None


class TimedSampler(optuna.samplers.BaseSampler):
    """Passes everything to `inner` and adds up the seconds it spends choosing params, in all
    (`seconds`) and per trial number (`per_trial`)."""

    def __init__(self, inner: optuna.samplers.BaseSampler) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.per_trial: dict[int, float] = {}

    def _timed(self, method: str, study: optuna.Study, trial: Any, *rest: object) -> Any:
        start = time.perf_counter()
        try:
            return getattr(self.inner, method)(study, trial, *rest)
        finally:
            spent = time.perf_counter() - start
            self.seconds += spent
            self.per_trial[trial.number] = self.per_trial.get(trial.number, 0.0) + spent

    def infer_relative_search_space(self, study, trial):  # type: ignore[no-untyped-def]
        return self._timed("infer_relative_search_space", study, trial)

    def sample_relative(self, study, trial, search_space):  # type: ignore[no-untyped-def]
        return self._timed("sample_relative", study, trial, search_space)

    def sample_independent(self, study, trial, name, distribution):  # type: ignore[no-untyped-def]
        return self._timed("sample_independent", study, trial, name, distribution)

    def before_trial(self, study, trial):  # type: ignore[no-untyped-def]
        self.inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):  # type: ignore[no-untyped-def]
        self.inner.after_trial(study, trial, state, values)


#: The key of the vendor's seconds in `retime`'s result.
VENDOR = "vendor"


def retime(
    kernels: dict[str, tuple[Any, dict]],
    target: dict[str, Any],
    settings: MeasureSettings,
    rounds: int,
    vendor_library: str | None = None,
) -> dict[str, float]:
    """Median seconds of each named (template, config) kernel on `target`, timed round-robin
    over `rounds` rounds of `settings` so that drift hits all alike; a kernel that never ran is
    left out.

    With `vendor_library` (the name the tuning's `Measurer.vendor_baseline` gave), that same
    library is timed on the kernels' workload in the same rounds, first in each, and its
    median reading is returned under the key `VENDOR`; left out if the library is no longer
    installed. Default None: no vendor.
    """
    costs: dict[str, list[float]] = {name: [] for name in kernels}
    measurers = {name: Measurer(tpl, target, settings) for name, (tpl, _) in kernels.items()}
    vendor: Measurer | None = None
    if vendor_library and kernels:
        vendor = Measurer(next(iter(kernels.values()))[0], target, settings)
    readings: list[float] = []
    try:
        for _ in range(rounds):
            readings += _vendor_seconds(vendor, vendor_library)
            for name, measurer in measurers.items():
                result = measurer.measure([kernels[name][1]])[0]
                costs[name].extend(result.costs or [])
    finally:
        for measurer in [*measurers.values(), *([vendor] if vendor else [])]:
            measurer.close()
    seconds = {name: statistics.median(c) for name, c in costs.items() if c}
    if readings:
        seconds[VENDOR] = statistics.median(readings)
    return seconds


def _vendor_seconds(vendor: Measurer | None, library: str | None) -> list[float]:
    """One reading of the vendor `library` by `vendor` (none without either, or when the
    library is no longer the one installed)."""
    found = vendor.vendor_baseline(library) if vendor is not None and library else None
    return [found[1]] if found is not None and found[0] == library else []


#: The re-timing of tuned winners (`retime`) in the benchmarks; the studies time with `SETTINGS`.
RETIME = MeasureSettings(repeat=5, min_repeat_ms=50)
RETIME_ROUNDS = 3


def early_winners(study: optuna.Study, checkpoints: tuple[int, ...]) -> dict[int, dict]:
    """The config of the best trial among the first n, for each n of `checkpoints` below the
    study's trial count (none where no trial so far succeeded)."""
    return {n: found[0] for n, found in early_finalists(study, checkpoints, 1).items()}


def early_finalists(
    study: optuna.Study, checkpoints: tuple[int, ...], count: int
) -> dict[int, list[dict]]:
    """The configs of the `count` best distinct trials among the first n, best first
    (`tensortune.finalists.best_distinct`), for each n of `checkpoints` below the study's
    trial count (none where no trial so far succeeded)."""
    trials = sorted(study.trials, key=lambda t: t.number)
    found = {}
    for n in (n for n in checkpoints if n < len(trials)):
        best = best_distinct(trials[:n], count)
        if best:
            found[n] = [dict(t.params) for t in best]
    return found


def retime_in_passes(
    template: Any,
    configs: list[dict],
    target: dict[str, Any],
    settings: MeasureSettings,
    rounds: int,
    passes: int = 2,
    vendor_library: str | None = None,
) -> list[dict[Any, float]]:
    """Median seconds of each of `configs` (all of `template`), per pass: each is built once and
    timed in `passes` x `rounds` rounds, every config in each round; round r counts for pass
    r % `passes`, so that the passes interleave and drift hits every pass and config alike, and
    runs in the order `round_orders` gives the pass's (r // `passes`)-th round, so that each
    pass sees the configs forward and backward. A pick made on one pass's readings is judged
    fairly on another's (the fastest of a pass's own readings is biased upward, as a study's
    best is).

    Per pass: ``{config index: seconds}``, a config that never ran left out, and with
    `vendor_library` (as in `retime`) that library timed at the start of each round (in the
    first, after the build's own timing of the configs), under `VENDOR`.
    """
    costs: list[dict[Any, list[float]]] = [{} for _ in range(passes)]
    with Measurer(template, target, settings) as measurer:
        vendor = Measurer(template, target, settings) if vendor_library else None
        try:
            results = measurer.measure(configs)  # built once; this timing is round 0's
            orders = round_orders(len(configs), rounds)
            for r in range(passes * rounds):
                order = orders[r // passes]
                costs[r % passes].setdefault(VENDOR, []).extend(
                    _vendor_seconds(vendor, vendor_library)
                )
                if r:
                    measurer.time_again([results[i] for i in order])
                for i in order:
                    costs[r % passes].setdefault(i, []).extend(results[i].costs or [])
        finally:
            if vendor is not None:
                vendor.close()
    return [{k: statistics.median(c) for k, c in p.items() if c} for p in costs]


def first_trial(values: list[float | None], level: float, *, above: bool = False) -> int | str:
    """The 1-based trial whose value first reaches `level` (exceeds it, with `above`), or ''
    if none does. `values` are per trial in order, None for a failed one."""
    for i, value in enumerate(values):
        if value is not None and (value > level if above else value >= level):
            return i + 1
    return ""


# -- recorded measurements (tests/data) for the cost-model studies ------------------------------
DATA = os.path.join(HERE, "..", "tests", "data")
DATASETS = ("conv2d_a", "conv2d_b", "matmul_a")
#: (train on, test on): another shape of the same operator, then another operator.
TRANSFERS = (
    ("conv2d_a", "conv2d_b"),
    ("conv2d_b", "conv2d_a"),
    ("conv2d_a+conv2d_b", "matmul_a"),
    ("matmul_a", "conv2d_a"),
)


def load(name: str, feature_set: str, limit: int | None) -> tuple[np.ndarray, np.ndarray, float]:
    """Feature rows, targets scaled per dataset, and extraction configs/s."""
    from tensortune.features import FeatureExtractor
    from tensortune.sampler.history import training_targets
    from tensortune.templates import CpuTemplate

    with open(os.path.join(DATA, f"{name}.json")) as f:
        data = json.load(f)
    records = data["records"][:limit]
    workload = tensortune.get_workload(data["workload"], **data["shape"])
    extractor = FeatureExtractor(CpuTemplate(workload), feature_set)
    extractor([records[0]["config"]])  # the first call pays one-time setup
    start = time.perf_counter()
    rows = extractor([r["config"] for r in records[1:]])
    rate = (len(records) - 1) / (time.perf_counter() - start)
    rows = np.vstack([extractor([records[0]["config"]]), rows])
    values = np.array([np.nan if r["gflops"] is None else r["gflops"] for r in records])
    return rows, training_targets(values), rate


def half_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of a random half to train on and the other half to test on."""
    order = np.random.default_rng(seed).permutation(n)
    return order[: n // 2], order[n // 2 :]
