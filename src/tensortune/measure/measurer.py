"""Build candidates in a pool of worker processes, then time them one at a time in another.

Why not MetaSchedule's `LocalBuilder` / `LocalRunner`: the builder starts a fresh process pool on
every `build()` call (a second of imports per batch, more with torch installed, because tvm-ffi
imports it) and pickles IR modules, which segfaults on tvm-ffi 0.1.15; the runner times random
arguments and has no place to compare a result with a reference. What they share with us is
TVM's `PopenPoolExecutor` / `PopenWorker`, which kill a task at its timeout and survive a
crashing child, and that is what is used here, made safe to interrupt by
`tensortune.worker_pool`. TVM's `time_evaluator` does the timing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import threading
import uuid
import warnings
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from tensortune import scratch
from tensortune.errors import TensortuneError
from tensortune.measure import baseline, remote, worker_tasks
from tensortune.measure.remote import RpcDevice
from tensortune.measure.settings import CACHE_STATES, MeasureSettings
from tensortune.target import host_cores
from tensortune.templates.weight_packing import PackedWeight
from tensortune.worker_pool import Worker, WorkerPool, kill_processes

if TYPE_CHECKING:
    from tensortune.templates import Template

# Idle workers are recycled after this many tasks: TVM notes a slow leak in long-lived builders.
_MAX_USES = 256
_WARM_UP_TIMEOUT = 300.0
# Kernels go to a temporary folder named after this; one left by a killed run is deleted by the
# next (`tensortune.scratch`).
_FOLDER_PREFIX = "tensortune-"
# Beyond RpcDevice.wait_for_device, for the connect task's own watchdog: it fires only when an
# RPC call without a timeout of its own hangs (a ping of a device that stopped answering, a
# connect to a host that vanished from the network).
_CONNECT_SLACK = 10.0


@dataclasses.dataclass
class MeasureResult:
    """The outcome of one candidate.

    Attributes:
        costs: Seconds per run, one per repeat; empty when the candidate failed.
        error: Why it failed (``None`` when it did not).
        stage: Where it failed: ``"build"``, ``"run"``, ``"check"`` or ``"timeout"`` here,
            ``"device"`` when no remote device could be had to time it on;
            ``"invalid"`` when `tensortune.Objective` refuses the config before any build.
        compile_seconds: Time spent scheduling and compiling it (``nan`` if unknown).
        library: Path of the compiled kernel, while the measurer is open.
        cache: How the caches stood before each of its timed runs (`MeasureSettings.cache`
            on a CPU, ``"warm"`` elsewhere).
        packed: The arguments its kernel takes packed, packed once before the check and the
            timing (see `tensortune.templates.compile.compile_config`); mostly none.
    """

    costs: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None
    stage: str | None = None
    compile_seconds: float = float("nan")
    library: str | None = None
    cache: str = CACHE_STATES[0]
    packed: tuple[PackedWeight, ...] = ()

    @property
    def cost(self) -> float:
        """Median cost in seconds (``nan`` for a failed candidate)."""
        return statistics.median(self.costs) if self.costs else float("nan")


class MeasurerLike(Protocol):
    """What `tensortune.Objective` and `tensortune.tune` need to measure candidates: `Measurer`
    itself, or a stand-in that wraps one (e.g. the benchmarks' measurement cache,
    ``studies/measurement_cache.py``).

    `tensortune.tune` also calls ``vendor_baseline()`` (as `Measurer.vendor_baseline`) when
    the object has one and the study is new; without it the study has no vendor baseline.
    """

    def measure(self, configs: Sequence[dict[str, Any]]) -> list[MeasureResult]:
        """One `MeasureResult` per config, in order (see `Measurer.measure`); safe to call from
        several threads at once. A result may carry no ``library``."""
        ...

    def close(self) -> None:
        """Release the workers and files; never raises."""
        ...


def _worker_env() -> None:
    # TVM's runtime would use one thread of two on some VMs; child processes inherit this.
    cores = str(host_cores())
    os.environ.setdefault("TVM_NUM_THREADS", cores)


class Measurer:
    """Builds candidates of one template (and so one workload) on the host and times them there
    or on a remote device.

    Use as a context manager (or call `close`) so that the worker processes and the temporary
    kernel files go away.

    Args:
        template: Knobs → schedule for the workload (a `tensortune.templates.Template`, e.g.
            a `tensortune.CpuTemplate`); it must pickle.
        target: Target dict, as returned by `tensortune.target.target_spec`.
        settings: Build and timing settings. Default `MeasureSettings()`.
        device: Time on this device of an RPC tracker instead of the host; `target` must
            then describe that device. Default None: the host. Not with a ``"dirty"``
            `MeasureSettings.cache` (`TensortuneError`).
    """

    def __init__(
        self,
        template: Template,
        target: dict[str, Any],
        settings: MeasureSettings | None = None,
        device: RpcDevice | None = None,
    ) -> None:
        self.template = template
        self.workload = template.workload
        self.target = target
        self.settings = settings or MeasureSettings()
        if device is not None and self.settings.cache == "dirty":
            # Its sweep is a function of this process's TVM, which a remote runtime lacks.
            raise TensortuneError(
                "cache state 'dirty' times on this host only; on an RPC device choose "
                "'warm' or 'flushed'"
            )
        self.device = device
        # Why no device could be had in this batch; the rest of the batch fails without waiting.
        self._device_error: str | None = None
        self._builders: Any = None
        self._runner: Any = None
        self._dir: str | None = None
        self._folder: scratch.Folder | None = None
        # One batch at a time: threads of study.optimize(n_jobs=...) share the workers.
        self._lock = threading.Lock()
        # Whether the run worker has run kernels since it started (see _vendor_baseline).
        self._runner_used = False

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        if self._dir is not None:
            return
        _worker_env()
        scratch.sweep(_FOLDER_PREFIX)  # kernels of runs that were killed
        self._folder = scratch.make_folder(_FOLDER_PREFIX)
        self._dir = self._folder.path
        self._builders = WorkerPool(
            max_workers=self.settings.build_workers,
            timeout=self.settings.build_timeout,
            maximum_process_uses=_MAX_USES,
        )
        self._runner = Worker()
        self._runner.send(worker_tasks.warm_up, timeout=_WARM_UP_TIMEOUT)
        self._runner.recv()

    def close(self) -> None:
        """Stop the workers and delete the compiled kernels; never raises.

        Safe at any moment of an interrupt: the worker processes are killed first, so that
        no thread waits on a build or a timing that would go on."""
        builders, runner, folder = self._builders, self._runner, self._folder
        self._builders = self._runner = self._dir = self._folder = None
        if builders is not None:
            builders.close()
        if runner is not None:
            kill_processes(runner)
            with contextlib.suppress(Exception):  # e.g. an optimize thread killed it too
                runner.kill()
        if folder is not None:
            folder.remove()

    def use_template(self, template: Template) -> None:
        """Measure configs of `template` from now on: another workload for the same target and
        settings. The worker processes stay (each build and timing is handed its template and
        workload), so that the tasks of a model share one set of them."""
        with self._lock:
            self.template = template
            self.workload = template.workload

    def measure(self, configs: Sequence[dict[str, Any]]) -> list[MeasureResult]:
        """Build all `configs` in parallel, then time each in turn.

        Timing waits for every build, so that no compiler shares the cores with a kernel being
        timed. A config that fails to build, crashes, hangs or computes a wrong result gets a
        failed `MeasureResult`; the others are unaffected.
        """
        with self._lock:
            return self._measure(configs)

    def _measure(self, configs: Sequence[dict[str, Any]]) -> list[MeasureResult]:
        self._start()
        assert self._dir is not None
        futures: list[tuple[Future, str]] = []
        for config in configs:
            path = os.path.join(self._dir, f"{uuid.uuid4().hex}.so")
            future = self._builders.submit(
                worker_tasks.build, self.template, dict(config), self.target, path
            )
            futures.append((future, path))
        results = [self._collect_build(future, path) for future, path in futures]
        self._device_error = None
        for result in results:
            if result.error is None and self.device is None:
                self._time(result)
            elif result.error is None:
                self._time_remote(result)
        return results

    def time_again(self, results: Sequence[MeasureResult]) -> None:
        """Time the kernels of `results` again, one after another in the order given, with no
        new build; each gets its new costs in place of the old. They must come from this
        measurer's `measure` calls with its current template, and it must still be open (its
        kernel files are deleted on `close`). A result that failed stays as it was; one that
        fails now gets its error and loses its costs."""
        with self._lock:
            self._device_error = None
            for result in results:
                if result.error is not None:
                    continue
                result.costs = []
                if self.device is None:
                    self._time(result)
                else:
                    self._time_remote(result)

    def _collect_build(self, future: Future, path: str) -> MeasureResult:
        try:
            seconds, packed = future.result()
        except TimeoutError:
            return MeasureResult(
                error=f"build timed out after {self.settings.build_timeout:g} s", stage="timeout"
            )
        except Exception as err:  # a compiler error, or the build worker died
            return MeasureResult(error=f"build failed: {_last_line(err)}", stage="build")
        return MeasureResult(compile_seconds=seconds, library=path, packed=tuple(packed))

    def _time(self, result: MeasureResult) -> None:
        assert result.library is not None
        args = (result.library, self.workload, self.settings, self.target["kind"], result.packed)
        self._run_timing(result, worker_tasks.run, args, "run failed: ")

    def _run_timing(self, result: MeasureResult, task: Any, args: tuple, failed: str) -> None:
        """Run the timing `task` in the run worker and record its outcome in `result`; a
        failure's reason follows the words `failed`."""
        timeout = self.settings.run_timeout
        self._runner_used = True
        try:
            self._runner.send(task, args, timeout=timeout)
            outcome = self._runner.recv()
        except TimeoutError:
            result.error, result.stage = f"run timed out after {timeout:g} s", "timeout"
            return
        except Exception as err:  # the kernel crashed its process, the session broke, or raised
            reason = _last_line(err).removeprefix(f"{remote.__name__}.SessionLost: ")
            result.error, result.stage = f"{failed}{reason}", "run"
            self._runner.kill()  # a fresh process for the next candidate
            return
        if isinstance(outcome, str):
            result.error, result.stage = outcome, "check"
        else:
            result.costs = outcome
            result.cache = worker_tasks.cache_state(self.settings, self.target["kind"])

    def _time_remote(self, result: MeasureResult) -> None:
        # The RPC calls run in the run worker too (see tensortune.measure.remote for why).
        s, device = self.settings, self.device
        assert result.library is not None and device is not None
        if self._device_error is None:
            try:
                self._runner.send(
                    remote.connect,
                    (device, s.run_timeout),
                    timeout=device.wait_for_device + _CONNECT_SLACK,
                )
                self._device_error = self._runner.recv()
            except TimeoutError:
                self._device_error = f"device {device} stopped answering"
            except Exception as err:  # the worker died
                self._device_error = f"cannot reach device {device}: {_last_line(err)}"
                self._runner.kill()
        if self._device_error is not None:
            result.error, result.stage = self._device_error, "device"
            return
        args = (result.library, self.workload, s, self.target["kind"], result.packed)
        self._run_timing(result, remote.run, args, f"run on {device} failed: ")

    def vendor_baseline(self, library: str | None = None) -> tuple[str, float] | None:
        """(library, median seconds) of the fastest vendor kernel for this workload, timed in
        the run worker like a candidate, in a process that has run no kernel, with
        `tensortune.measure.baseline.REPEAT_FACTOR` times a candidate's costs (see
        `baseline.vendor_time`); None when no vendor library covers the operator, and None
        when timing on a remote device (the vendor library would run on the host).

        Args:
            library: Time only this library (a name an earlier call returned). Default None:
                every installed one, the fastest kept.
        """
        if self.device is not None:
            return None
        with self._lock:
            return self._vendor_baseline(library)

    def _vendor_baseline(self, library: str | None) -> tuple[str, float] | None:
        self._start()
        s = self.settings
        threads = int(self.target.get("num-cores", host_cores()))
        if self._runner_used:  # TVM's thread pool from earlier kernels: a fresh process instead
            self._runner.kill()
        try:
            self._runner.send(
                baseline.vendor_time,
                (self.workload, s.repeat, s.min_repeat_ms, threads, self.target["kind"], library),
                timeout=_WARM_UP_TIMEOUT,
            )
            found = self._runner.recv()
        except Exception as err:  # tuning is still worth doing without a baseline
            warnings.warn(
                f"vendor baseline failed, tuning without it: {_last_line(err)}", stacklevel=2
            )
            return None
        finally:
            # The vendor's thread pool spins on after its last call; kernels timed next to it
            # in that process measured up to 100x slow. The next candidate gets a fresh one.
            self._runner.kill()
            self._runner_used = False
        if found is None:
            return None
        name, costs = found
        return name, statistics.median(costs)


def _last_line(err: BaseException) -> str:
    text = str(err).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(err).__name__
