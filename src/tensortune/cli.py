"""``tensortune`` command line: tune, best, export, dashboard, workloads, and the whole-model
commands of `tensortune.cli_model` (tune-model, best-model, export-model)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from tensortune.cli_model import (
    add_cache_arguments,
    add_model_commands,
    best_model_command,
    export_model_command,
    tune_model_command,
)
from tensortune.cost_model import ACQUISITIONS, COST_MODELS, DEFAULT_COST_MODEL, LOSSES
from tensortune.errors import TensortuneError
from tensortune.sampler.source_weighting import SOURCE_WEIGHTINGS, weighting_choices
from tensortune.storage import DEFAULT_STORAGE
from tensortune.templates import SPACES
from tensortune.tuning import SAMPLERS, make_sampler

if TYPE_CHECKING:
    from tensortune.measure import RpcDevice


#: Trials of `tensortune tune` without --trials or --total-trials.
DEFAULT_TRIALS = 64


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error told in one line like every other bad input (argparse
    prints the whole usage first, 14 lines for ``tune``); ``--help`` is unchanged."""

    def error(self, message: str) -> NoReturn:
        # A value the user typed may hold a newline or an escape code: show those escaped.
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, f"tensortune: error: {shown} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tensortune", description="Tune tensor programs with TVM and Optuna.")
    sub = parser.add_subparsers(dest="command", required=True)

    tune = sub.add_parser("tune", help="run (or resume) a tuning study")
    tune.add_argument(
        "workload",
        help="registered workload name (see `tensortune workloads`), or module:function of "
        "your own, a function decorated with @tensortune.register_workload",
    )
    tune.add_argument(
        "--shape",
        required=True,
        help="shape values in order (1024,1024,1024), by name (M=1024,N=1024,K=1024) or a "
        "preset (resnet18-c7)",
    )
    tune.add_argument(
        "--target", default="llvm", help="llvm (this machine; default) or a JSON target"
    )
    tune.add_argument(
        "--trials", type=int, default=None, help=f"trials to run now (default {DEFAULT_TRIALS})"
    )
    tune.add_argument(
        "--total-trials",
        type=int,
        default=None,
        metavar="N",
        help="instead of --trials: run until the study holds N finished trials, so that the "
        "same command resumes a killed run (default: off)",
    )
    tune.add_argument(
        "--storage", default=DEFAULT_STORAGE, help=f"Optuna storage URL (default {DEFAULT_STORAGE})"
    )
    tune.add_argument("--study", default=None, help="study name (default: workload and target)")
    tune.add_argument(
        "--space",
        choices=SPACES,
        default=SPACES[0],
        help=f"search space: {SPACES[0]} is the target's hand-written template, metaschedule "
        f"MetaSchedule's design space of the workload (default {SPACES[0]})",
    )
    tune.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=SAMPLERS[0],
        help=f"{SAMPLERS[0]} is the learned search (default {SAMPLERS[0]})",
    )
    tune.add_argument(
        "--acquisition",
        choices=ACQUISITIONS,
        default=None,
        help="costmodel: score candidates by the predicted mean, expected improvement or "
        f"upper confidence bound (default {ACQUISITIONS[0]})",
    )
    tune.add_argument(
        "--loss",
        choices=LOSSES,
        default=None,
        help="costmodel: train the cost model to rank or to regress throughput "
        f"(default {LOSSES[0]})",
    )
    tune.add_argument(
        "--cost-model",
        choices=tuple(COST_MODELS),
        default=None,
        help="costmodel: XGBoost over program features, or a TreeGRU over the loop tree "
        f"(needs PyTorch) (default {DEFAULT_COST_MODEL})",
    )
    tune.add_argument(
        "--transfer-from",
        action="append",
        default=[],
        metavar="STUDY",
        help="costmodel: warm-start from this prior study of any workload on the same target; "
        "repeat for several, or 'auto': the studies of this target in --transfer-storage, "
        "nearest program first, at most 4 (default: none, a cold start)",
    )
    tune.add_argument(
        "--source-weighting",
        choices=SOURCE_WEIGHTINGS,
        default=None,
        help="costmodel: how the --transfer-from studies weigh next to the study's own "
        f"configs: {weighting_choices()} (default {SOURCE_WEIGHTINGS[0]})",
    )
    tune.add_argument(
        "--transfer-storage",
        default=None,
        help="Optuna storage URL of the --transfer-from studies (default: --storage)",
    )
    tune.add_argument("--seed", type=int, default=None, help="sampler seed (default: unseeded)")
    tune.add_argument(
        "--batch-size", type=int, default=8, help="trials built in parallel (default 8)"
    )
    tune.add_argument("--number", type=int, default=1, help="runs per timed cost (default 1)")
    tune.add_argument("--repeat", type=int, default=5, help="timed costs per candidate (default 5)")
    tune.add_argument(
        "--min-repeat-ms", type=int, default=50, help="least ms per cost (default 50)"
    )
    tune.add_argument("--build-timeout", type=float, default=15.0, help="seconds (default 15)")
    tune.add_argument("--run-timeout", type=float, default=20.0, help="seconds (default 20)")
    add_cache_arguments(tune)
    tune.add_argument(
        "--rpc-tracker",
        default=None,
        metavar="HOST:PORT",
        help="time on a device of this TVM RPC tracker (with --device-key; give --target for "
        "the device) instead of this machine (default: this machine)",
    )
    tune.add_argument(
        "--device-key", default=None, metavar="KEY", help="key the device's RPC servers use"
    )
    tune.add_argument(
        "--device-wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --rpc-tracker: how long to wait for a free device before failing a trial "
        "(default 60)",
    )
    tune.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    tune.add_argument(
        "--artifact-dir",
        default=None,
        help="folder of the best kernels' TIR and code, shown as optuna-dashboard artifacts "
        "(default: NAME-artifacts beside a SQLite --storage; none for a server storage)",
    )

    best = sub.add_parser("best", help="print a study's best config and its numbers")
    best.add_argument("--storage", default=DEFAULT_STORAGE, help=f"default {DEFAULT_STORAGE}")
    best.add_argument("--study", required=True)
    best.add_argument("--json", action="store_true", help="print JSON")

    export = sub.add_parser("export", help="compile a study's best kernel into a folder")
    export.add_argument("--storage", default=DEFAULT_STORAGE, help=f"default {DEFAULT_STORAGE}")
    export.add_argument("--study", required=True)
    export.add_argument("-o", "--output", required=True, help="folder to create")
    export.add_argument(
        "--finalists",
        type=int,
        default=1,
        help="export the fastest of the study's best N configs, timed again side by side on "
        "this host (default 1: the study's best as tuning timed it)",
    )

    dash = sub.add_parser("dashboard", help="serve optuna-dashboard on a storage")
    dash.add_argument("--storage", default=DEFAULT_STORAGE, help=f"default {DEFAULT_STORAGE}")
    dash.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    dash.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    dash.add_argument(
        "--artifact-dir",
        default=None,
        help="folder of the best kernels' TIR and code, shown as optuna-dashboard artifacts "
        "(default: NAME-artifacts beside a SQLite --storage; none for a server storage)",
    )

    sub.add_parser("workloads", help="list registered workloads and shape presets")
    add_model_commands(sub)
    return parser


def _print_summary(summary: dict) -> None:
    print(f"study     {summary['study']}")
    print(f"workload  {summary['workload']}")
    print(f"trials    {summary['trials_complete']} complete of {summary['trials_total']}")
    print(f"best      {summary['gflops']:.1f} GFLOP/s (trial {summary['trial']})")
    if summary.get("vendor_gflops"):
        print(
            f"vendor    {summary['vendor_gflops']:.1f} GFLOP/s ({summary['vendor_library']}); "
            f"best is {summary['gflops'] / summary['vendor_gflops']:.2f}x"
        )
    else:
        print(
            "vendor    no baseline for this operator "
            "(convolutions need: pip install 'tensortune[baselines]')"
        )
    print("config    " + json.dumps(summary["config"]))


def _tune(args: argparse.Namespace) -> None:
    from tensortune.measure import MeasureSettings
    from tensortune.sampler.nearest_studies import AUTO, find_sources
    from tensortune.storage import best_summary, load_study, open_storage, target_key
    from tensortune.target import target_spec
    from tensortune.tuning import tune
    from tensortune.workloads import import_workload, parse_shape

    # Options that would be ignored without a word.
    if args.total_trials is not None and args.trials is not None:
        raise TensortuneError("give --trials or --total-trials, not both")
    if args.transfer_storage is not None and not args.transfer_from:
        raise TensortuneError("--transfer-storage holds --transfer-from studies: give those too")
    if args.source_weighting is not None and not args.transfer_from:
        raise TensortuneError("--source-weighting weighs --transfer-from studies: give those too")
    name = import_workload(args.workload) if ":" in args.workload else args.workload
    workload = parse_shape(name, args.shape)
    device = _rpc_device(args)
    sources: list | str = []
    if AUTO in args.transfer_from and len(args.transfer_from) > 1:
        raise TensortuneError("--transfer-from auto finds the studies itself: give no others")
    if args.transfer_from == [AUTO] and args.transfer_storage is None:
        sources = AUTO  # found in --storage once it is open (tensortune.tune)
    elif args.transfer_from == [AUTO]:
        source_db = open_storage(args.transfer_storage, must_exist=True)
        spec = target_key(target_spec(args.target))
        sources = [s for s, _ in find_sources(source_db, workload, spec)]
    elif args.transfer_from:
        source_db = open_storage(args.transfer_storage or args.storage, must_exist=True)
        sources = [load_study(source_db, name) for name in args.transfer_from]
    settings = MeasureSettings(
        number=args.number,
        repeat=args.repeat,
        min_repeat_ms=args.min_repeat_ms,
        build_timeout=args.build_timeout,
        run_timeout=args.run_timeout,
        cache=args.cache,
    )
    study = tune(
        workload,
        args.target,
        DEFAULT_TRIALS if args.trials is None else args.trials,
        storage=args.storage,
        study_name=args.study,
        sampler=make_sampler(
            args.sampler,
            args.seed,
            batch_size=args.batch_size,
            acquisition=args.acquisition,
            loss=args.loss,
            source_studies=sources,
            cost_model=args.cost_model,
            source_weighting=args.source_weighting,
        ),
        settings=settings,
        batch_size=args.batch_size,
        show_progress=not args.no_progress,
        artifact_dir=args.artifact_dir,
        device=device,
        total_trials=args.total_trials,
        space=args.space,
    )
    _print_summary(best_summary(study))


def _rpc_device(args: argparse.Namespace) -> RpcDevice | None:
    """The device of --rpc-tracker and --device-key (both or neither), or None."""
    from tensortune.measure import RpcDevice

    if args.rpc_tracker is None and args.device_key is None:
        return None
    if args.rpc_tracker is None or args.device_key is None:
        raise TensortuneError("--rpc-tracker and --device-key go together: give both or neither")
    return RpcDevice(args.rpc_tracker, args.device_key, wait_for_device=args.device_wait)


def _best(args: argparse.Namespace) -> None:
    from tensortune.storage import best_summary, load_study, open_storage

    summary = best_summary(load_study(open_storage(args.storage, must_exist=True), args.study))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)


def _export(args: argparse.Namespace) -> None:
    from tensortune.export import export_best
    from tensortune.storage import load_study, open_storage

    if args.finalists < 1:
        raise TensortuneError(f"--finalists must be at least 1, got {args.finalists}")
    study = load_study(open_storage(args.storage, must_exist=True), args.study)
    if args.finalists > 1:
        print(f"timing the study's best {args.finalists} configs again...", flush=True)
    directory = export_best(study, args.output, finalists=args.finalists)
    with open(os.path.join(directory, "config.json")) as f:
        manifest = json.load(f)
    picked = manifest.get("finalists")
    if picked is None and args.finalists > 1:
        print(f"fewer than two configs could be timed again: trial {manifest['trial']}, the "
              "study's best as tuned")  # fmt: skip
    if picked is not None:
        timed = len(picked["timed_again"])
        best = picked["study_best_trial"]
        how = "its best" if manifest["trial"] == best else f"over its best, trial {best}"
        print(
            f"trial {manifest['trial']} ({picked['retimed_gflops']:.1f} GFLOP/s timed again), "
            f"the fastest of the study's {timed} best configs timed again, {how}"
        )
    print(f"exported to {directory}")


def _dashboard(args: argparse.Namespace) -> None:
    from tensortune.dashboard import serve

    def ready() -> None:
        print(f"optuna-dashboard on http://{args.host}:{args.port}/ (Ctrl-C stops it)", flush=True)

    try:
        serve(args.storage, args.host, args.port, args.artifact_dir, on_ready=ready)
    except OSError as err:  # the port is taken, or the host is not this machine's
        raise TensortuneError(f"cannot serve on {args.host}:{args.port}: {err}") from None
    except KeyboardInterrupt:
        pass


def _workloads(args: argparse.Namespace) -> None:
    from tensortune.workloads import PRESETS, workload_definition, workload_names

    for name in workload_names():
        params = workload_definition(name).params
        print(f"{name}(" + ", ".join(p if d is None else f"{p}={d}" for p, d in params) + ")")
    print("presets: " + ", ".join(f"{k} ({v[0]})" for k, v in PRESETS.items()))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2 for bad input, with one line on stderr; 130
    once interrupted by Ctrl-C, whatever error the interrupt led to while unwinding)."""
    args = _parser().parse_args(argv)
    handler = {
        "tune": _tune,
        "best": _best,
        "export": _export,
        "dashboard": _dashboard,
        "workloads": _workloads,
        "tune-model": tune_model_command,
        "best-model": best_model_command,
        "export-model": export_model_command,
    }[args.command]
    seen: list[int] = []  # SIGINTs received, also those a library turned into another error
    restore = _note_interrupts(seen)
    try:
        handler(args)
    except TensortuneError as err:
        if not seen:
            print(f"tensortune: error: {err}", file=sys.stderr)
            return 2
        _report_interrupt()
        return 130
    except BaseException as err:
        if not (seen or _caused_by_interrupt(err)):
            raise
        _report_interrupt()
        return 130
    finally:
        restore()
    if seen:  # a library swallowed the interrupt
        _report_interrupt()
        return 130
    return 0


def _report_interrupt() -> None:
    print("tensortune: interrupted; completed trials are saved", file=sys.stderr)


def _note_interrupts(seen: list[int]) -> Callable[[], None]:
    """Make SIGINT append to `seen` before raising `KeyboardInterrupt` as usual; returns what
    restores the previous handlers. Only the main thread can; elsewhere nothing is noted.

    A SIGINT that lands while a finalizer or weakref callback runs (the garbage collector
    calls them between any two bytecodes) raises there, and Python drops exceptions raised
    there, printing "Exception ignored" with a traceback: the Ctrl-C would be lost and the
    run go on. Such a dropped interrupt is delivered again, once the callback has returned,
    and nothing is printed of it."""
    import _thread
    import signal
    import time

    def on_sigint(signum: int, frame: Any) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    def on_unraisable(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # Not from here: the callback is still on the stack. A thread raises it anew,
            # started by `_thread`, whose start takes none of the locks of `threading` that
            # the code the collector interrupted may hold.
            _thread.start_new_thread(_redeliver, ())
            return
        old_hook(unraisable)

    def _redeliver() -> None:
        time.sleep(0.01)
        _thread.interrupt_main(signal.SIGINT)

    try:
        old = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread
        return lambda: None
    old_hook = sys.unraisablehook
    sys.unraisablehook = on_unraisable

    def restore() -> None:
        signal.signal(signal.SIGINT, old)
        sys.unraisablehook = old_hook

    return restore


def _caused_by_interrupt(err: BaseException) -> bool:
    """Whether `err` is a `KeyboardInterrupt` or was raised while handling one."""
    chain: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in chain:
        if isinstance(current, KeyboardInterrupt):
            return True
        chain.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def entry() -> None:
    """The ``tensortune`` command: `main`, then exit with its status."""
    code = main()
    if code == 130:
        # Interrupted: every trial is closed in storage and the workers are killed by now.
        # Leave at once rather than wait for the interpreter to join worker threads and run
        # finalizers at exit, which a library could hold up.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
