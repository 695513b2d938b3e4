"""How candidates are built and timed."""

from __future__ import annotations

import dataclasses

from tensortune.target import host_cores

#: How the CPU caches stand before each timed run, each with the one line the CLIs show; the
#: first is the default. ``"warm"``: repeated runs on the same data, as tuners and benchmarks
#: usually time. ``"flushed"``: every argument but the first evicted first (TVM's
#: ``cache_flush_cpu_non_first_arg``), the weights' state in a model, in clean caches.
#: ``"dirty"``: every core's caches filled with written data first
#: (`tensortune.measure.cache_sweep`), meant as a kernel of a whole model finds them after the
#: other kernels ran. On a 2-vCPU Intel guest ResNet-18's kernels took 1.15-1.24x their warm
#: time in the model, 1.05-1.09x dirty and 1.27-1.33x flushed (a BERT layer's: 0.96-1.03x in
#: the model); tuned dirty it ran 1.05x faster (two seeds) and flushed 1.02x (a tie), but the
#: BERT layer 0.91x and 0.87x (one seed), so neither cold state is the default. Both time one
#: run per cost, and apply on a CPU only: a GPU's timings ignore them.
CACHE_STATES_SUMMARIES = {
    "warm": "repeated runs on the same data",
    "flushed": "each run after the arguments but the first are evicted from the CPU caches, "
    "as a kernel finds its weights in a whole model",
    "dirty": "each run after 64 MiB are written on every thread, meant as a kernel finds the "
    "caches in a whole model after the other kernels ran",
}
CACHE_STATES = tuple(CACHE_STATES_SUMMARIES)
#: Costs a candidate records where `tune-model` times with cold caches: each cost is then one
#: run, and single runs vary more than `MeasureSettings`' 50 ms spans of warm ones.
COLD_REPEAT = 10


def cache_state_choices() -> str:
    """Every cache state with its line (`CACHE_STATES_SUMMARIES`), for a CLI's help."""
    return "; ".join(f"{name}: {line}" for name, line in CACHE_STATES_SUMMARIES.items())


@dataclasses.dataclass(frozen=True)
class MeasureSettings:
    """Build and timing settings.

    Attributes:
        number: Kernel runs averaged into one cost. Default 1 (raised automatically until a cost
            spans `min_repeat_ms`).
        repeat: Costs recorded per candidate; the objective uses their median. Default 5.
        min_repeat_ms: Least time one cost spans, so that fast kernels are timed over many runs.
            Default 50 ms, which kept the spread of repeated measurements within a few percent on
            a 2-core VM.
        build_workers: Processes compiling candidates in parallel. Default: the host's cores.
        build_timeout: Seconds one build may take before it is killed; the trial then fails
            with stage ``timeout`` and the learned sampler scores it 0, so it steers away from
            configs that compile slowly. Default 15: a few configs of the CPU template (512
            unrolled steps of wide vectors) keep LLVM busy for 10-56 s, and one matmul study
            spent 760 s compiling 88 configs; the 5 best configs of every stored study compiled
            in under 6 s on a 2-core guest.
        run_timeout: Seconds one candidate's check and timing may take. Default 20.
        check_results: Compare the first run of each candidate with the NumPy reference.
            Default True.
        rtol: Relative tolerance of that check, scaled by the largest reference value.
            Default 1e-3 (float32 sums in any order stay far inside it).
        cache: How the CPU caches stand before each timed run, one of `CACHE_STATES`.
            Default ``"warm"``: repeated runs. ``"flushed"`` and ``"dirty"`` time each cost as
            one run (`number` and `min_repeat_ms` do not apply).
    """

    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 50
    build_workers: int = dataclasses.field(default_factory=host_cores)
    build_timeout: float = 15.0
    run_timeout: float = 20.0
    check_results: bool = True
    rtol: float = 1e-3
    cache: str = CACHE_STATES[0]

    def __post_init__(self) -> None:
        from tensortune.errors import TensortuneError

        for name in ("number", "repeat", "build_workers"):
            if getattr(self, name) < 1:
                raise TensortuneError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("min_repeat_ms",):
            if getattr(self, name) < 0:
                raise TensortuneError(f"{name} must not be negative")
        if self.cache not in CACHE_STATES:
            raise TensortuneError(
                f"unknown cache state {self.cache!r}; choose one of {', '.join(CACHE_STATES)}"
            )
        for name in ("build_timeout", "run_timeout", "rtol"):
            if not getattr(self, name) > 0:
                raise TensortuneError(f"{name} must be positive, got {getattr(self, name)}")


def cache_settings(cache: str) -> MeasureSettings:
    """`MeasureSettings`' defaults timed with the caches in state `cache` (one of
    `CACHE_STATES`), with `COLD_REPEAT` costs a candidate where cold (as ``tune-model
    --cache`` times)."""
    settings = MeasureSettings(cache=cache)
    if settings.cache == CACHE_STATES[0]:
        return settings
    return dataclasses.replace(settings, repeat=COLD_REPEAT)
