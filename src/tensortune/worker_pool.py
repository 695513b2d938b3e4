"""TVM's `PopenWorker` / `PopenPoolExecutor`, made safe to interrupt.

Two things go wrong with TVM's own classes when the user presses Ctrl-C:

* The terminal sends SIGINT to its whole foreground process group, the worker processes
  included. A worker that dies of it makes its pool thread call ``PopenWorker.kill()`` while
  the main thread, unwinding the `KeyboardInterrupt`, kills the same worker; ``kill()`` is not
  thread-safe, its ``AttributeError`` replaces the interrupt, and ``PopenPoolExecutor.shutdown``
  leaves its lock held, so that the pool's ``__del__`` waits on it forever at exit.
* Killing a busy worker with ``kill()`` first closes its pipes, which waits for the thread
  that reads from them, i.e. for the task to end (a build can take minutes).

Here workers start with SIGINT ignored (the parent's process group still reaches them with
SIGTERM, SIGHUP or SIGKILL); ``kill()`` is serialised; and `WorkerPool.close` /
`kill_processes` kill the processes first, without touching the pipes that another thread
reads, so that every blocked ``recv`` returns at once, and never raise.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from tvm.support.popen_pool import PopenPoolExecutor, PopenWorker, kill_child_processes

# The worker's own first lines: ignore SIGINT, then let a SIGINT that came while it started
# (it was spawned with SIGINT blocked) be discarded, then run TVM's worker loop.
# tvm-ffi imports PyTorch as it loads, wherever PyTorch is installed: 3 of a worker's 4.5 s of
# start-up. Workers hand TVM no torch tensors, so TVM is imported with torch hidden; a task that
# imports torch itself (the vendor baseline) still gets it.
_WORKER_MAIN = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
    "hidden = 'torch' not in sys.modules\n"
    "if hidden:\n"
    "    sys.modules['torch'] = None\n"
    "from tvm.exec.popen_worker import main\n"
    "if hidden:\n"
    "    del sys.modules['torch']\n"
    "main()\n"
)


class Worker(PopenWorker):
    """A `PopenWorker` (same arguments) whose process ignores SIGINT and whose ``kill()`` is
    thread-safe. POSIX only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kill_lock = threading.Lock()

    def _start(self) -> None:
        if self._proc is not None:  # type: ignore[has-type]
            return
        main_read, worker_write = os.pipe()
        worker_read, main_write = os.pipe()
        cmd = [sys.executable, "-c", _WORKER_MAIN, str(worker_read), str(worker_write)]
        # Blocked here, SIGINT stays blocked in the child across exec until it ignores it: no
        # moment in which a Ctrl-C could kill a worker that is starting. The mask is this
        # thread's; a SIGINT for this process meanwhile goes to (or waits for) the main thread.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            try:
                proc = subprocess.Popen(
                    cmd,
                    pass_fds=(worker_read, worker_write),
                    stdout=self._stdout,
                    stderr=self._stderr,
                )
            finally:
                os.close(worker_read)
                os.close(worker_write)
            # All set before the mask is restored: an interrupt then finds a whole worker.
            self._reader = os.fdopen(main_read, "rb")
            self._writer = os.fdopen(main_write, "wb")
            self._proc = proc
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def kill(self) -> None:
        """TVM's ``kill()``, one thread at a time: the loser of a race finds nothing to do."""
        with self._kill_lock:
            super().kill()


def kill_processes(worker: PopenWorker) -> None:
    """SIGKILL `worker`'s process and its children, from any thread; never raises.

    The thread that waits on the worker then reads end-of-file and cleans up with ``kill()``
    itself, as after any crash of the worker."""
    proc = worker._proc  # read once: the owner thread may set it to None meanwhile
    if proc is None:
        return
    with contextlib.suppress(Exception):  # psutil missing, or the process gone
        kill_child_processes(proc.pid)
    with contextlib.suppress(Exception):
        proc.kill()


class WorkerPool(PopenPoolExecutor):
    """A `PopenPoolExecutor` (same arguments) of `Worker` processes, with a `close` that is
    safe from any moment of an interrupt."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._closed = False

    def _worker_run(self, fn: Any, args: Any, kwargs: Any) -> Any:
        tid = threading.get_ident()
        with self._lock:
            if self._closed:  # a task dequeued as the pool closed: start no process for it
                raise ChildProcessError("the worker pool is closed")
            worker = self._worker_map.get(tid)
            if worker is None:
                worker = Worker(
                    self._initializer,
                    self._initargs,
                    self._maximum_process_uses,
                    self._stdout,
                    self._stderr,
                )
                self._worker_map[tid] = worker
            # Under the lock, so that `close` sees every process that a task starts.
            worker.send(fn, args, kwargs, self._timeout)
        return worker.recv()

    def close(self) -> None:
        """Kill every worker process, cancel the tasks not started, and return at once; never
        raises. The pool threads see their workers die and end on their own."""
        # A thread holds the lock only while it starts a process or writes a task; bounded.
        locked = self._lock.acquire(timeout=10)
        try:
            self._closed = True
            workers = list(self._worker_map.values())
        finally:
            if locked:
                self._lock.release()
        for worker in workers:
            kill_processes(worker)
        self._shutdown = True  # TVM's __del__ would call shutdown(), which is not needed now
        with contextlib.suppress(Exception):
            self._threadpool.shutdown(wait=False, cancel_futures=True)

    def shutdown(self, wait: bool = True) -> None:
        """`close`, then, with `wait`, wait for the pool threads to end."""
        self.close()
        if wait:
            self._threadpool.shutdown(wait=True)
