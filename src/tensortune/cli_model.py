"""The whole-model commands of the ``tensortune`` command line: ``tune-model`` (tune the model's
tasks under one budget, then export it), ``best-model`` (where its tasks stand) and
``export-model`` (build and export what the studies hold, tuning nothing)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from tensortune.errors import TensortuneError
from tensortune.measure.settings import CACHE_STATES, cache_settings, cache_state_choices
from tensortune.model.tuning import WARM_SOURCES
from tensortune.sampler.source_weighting import SOURCE_WEIGHTINGS, weighting_choices
from tensortune.scratch import check_new_folder
from tensortune.storage import DEFAULT_STORAGE
from tensortune.tuning import SAMPLERS


def add_cache_arguments(parser: Any) -> None:
    """``--cache`` (`tensortune.measure.settings.CACHE_STATES`) and its older shorthand
    ``--flush-cache``, for ``tune`` and ``tune-model`` alike; both set ``args.cache``."""
    parser.add_argument(
        "--cache",
        default=CACHE_STATES[0],
        choices=CACHE_STATES,
        help=f"how the CPU caches stand before each timed run: {cache_state_choices()} "
        f"(default {CACHE_STATES[0]})",
    )
    parser.add_argument(
        "--flush-cache", dest="cache", action="store_const", const="flushed",
        help="the same as --cache flushed",
    )  # fmt: skip


def add_model_commands(sub: Any) -> None:
    """Add the three commands to the subparsers `sub` of the main parser."""
    tune = sub.add_parser("tune-model", help="tune a whole model's kernels, then export it")
    _model_arguments(tune)
    tune.add_argument(
        "--trials", type=int, required=True, help="the model's trial budget, over all its tasks"
    )
    tune.add_argument(
        "--sampler", default=SAMPLERS[0], choices=SAMPLERS, help=f"default {SAMPLERS[0]}"
    )
    tune.add_argument("--seed", type=int, default=0, help="each task sampler's seed (default 0)")
    add_cache_arguments(tune)
    tune.add_argument(
        "--warm-start-tasks",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="warm-start each task's cost model from the model's tasks of its kind already "
        "measured (costmodel sampler; default off: each task learns from its own trials "
        "alone, which with the default rewrites tied warm-started tasks in under half the time)",
    )
    tune.add_argument(
        "--source-weighting",
        choices=SOURCE_WEIGHTINGS,
        default=None,
        help="with warm-started tasks: how the other tasks' studies weigh next to a task's own "
        f"trials: {weighting_choices()} (default {SOURCE_WEIGHTINGS[0]}; decay with "
        "--warm-sources twins)",
    )
    tune.add_argument(
        "--warm-sources",
        choices=WARM_SOURCES,
        default=None,
        help="with warm-started tasks: which tasks each task learns from: kin (those of its "
        "kind, in program features) or twins (those with its design space, in decision "
        f"features: nothing lowered) (default {WARM_SOURCES[0]})",
    )
    tune.add_argument(
        "--share-bests",
        action="store_true",
        help="hand each task the best configs of the model's tasks with the same design space "
        "(the same convolution with another epilogue) as trials of its batches (default: each "
        "task runs only its own sampler's configs)",
    )
    tune.add_argument(
        "-o", "--output", default=None, help="folder to export to (default: MODEL-tuned)"
    )
    _finalists_argument(tune)
    best = sub.add_parser("best-model", help="print where a model's task studies stand")
    _model_arguments(best)
    export = sub.add_parser("export-model", help="build a model with its studies' best kernels")
    _model_arguments(export)
    export.add_argument("-o", "--output", required=True, help="folder to create")
    _finalists_argument(export)


def _finalists_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--finalists",
        type=int,
        default=1,
        metavar="N",
        help="build each task with the fastest of its study's best N configs (4, say), timed "
        "again side by side (default 1: each study's best as tuning timed it)",
    )


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an ONNX file")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME:SHAPE[:DTYPE]",
        help="a model input's static shape, e.g. input:1x3x224x224 (dtype default float32); "
        "one per input",
    )
    parser.add_argument(
        "--target", default="llvm", help="llvm (this machine; default) or a JSON target"
    )
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help=f"default {DEFAULT_STORAGE}")
    parser.add_argument(
        "--prepack-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let each kernel read the weights in a layout of its own, packed once at build "
        "time (CPU targets; its tasks' studies are apart from those of a run without it; "
        "default: on for CPU targets)",
    )
    parser.add_argument(
        "--winograd",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compute 3x3 convolutions of stride 1 as Winograd convolutions (F(4x4, 3x3); "
        "with --channels-last, F(2x2, 3x3) on small layers), their weights transformed once "
        "at build time (CPU targets; its tasks' studies are apart from those of a run "
        "without it; default: on for CPU targets)",
    )
    parser.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compute convolutions on NHWC data, so that kernels vectorize along the output "
        "channels; inputs and outputs keep their layout (CPU targets; with --winograd, NHWC "
        "Winograd convolutions; its tasks' studies are apart from those of a run without it; "
        "default: on for CPU targets)",
    )


def _program(args: argparse.Namespace) -> Any:
    from tensortune.model import load_onnx, parse_input

    return load_onnx(args.model, [parse_input(text) for text in args.input])


def tune_model_command(args: argparse.Namespace) -> None:
    import os

    from tensortune.model import tune_model

    if args.trials < 1:
        raise TensortuneError(f"--trials must be at least 1, got {args.trials}")
    if args.source_weighting is not None and not args.warm_start_tasks:
        raise TensortuneError(
            "--source-weighting weighs the sources of warm-started tasks: give "
            "--warm-start-tasks too"
        )
    if args.warm_sources is not None and not args.warm_start_tasks:
        raise TensortuneError(
            "--warm-sources are what warm-started tasks learn from: give --warm-start-tasks too"
        )
    _check_finalists(args.finalists)
    output = args.output or os.path.splitext(os.path.basename(args.model))[0] + "-tuned"
    check_new_folder(output)  # now, not after the tuning
    program = _program(args)
    settings = cache_settings(args.cache)
    tuning = tune_model(
        program, args.trials, args.target, storage=args.storage, sampler=args.sampler,
        seed=args.seed, settings=settings, prepack_weights=args.prepack_weights,
        winograd=args.winograd, channels_last=args.channels_last,
        warm_start=args.warm_start_tasks,
        source_weighting=args.source_weighting, share_bests=args.share_bests,
        warm_sources=args.warm_sources,
    )  # fmt: skip
    _export(tuning, output, args.finalists)


def _check_finalists(count: int) -> None:
    if count < 1:
        raise TensortuneError(f"--finalists must be at least 1, got {count}")


def best_model_command(args: argparse.Namespace) -> None:
    from tensortune.model.tuning import model_tuning, task_state

    tuning = model_tuning(
        _program(args), args.target, args.storage, prepack_weights=args.prepack_weights,
        winograd=args.winograd, channels_last=args.channels_last,
    )  # fmt: skip
    print(f"model     {tuning.program.name}: {len(tuning.tasks)} tasks")
    for task, study in zip(tuning.tasks, tuning.studies, strict=True):
        if study is None:
            print(f"  {task.name} (x{task.weight}): not tuned")
            continue
        state = task_state(task, study)
        best = f"{state.best * 1e6:.1f} us" if math.isfinite(state.best) else "none succeeded"
        print(f"  {task.name} (x{task.weight}): {state.trials} trials, best {best}")
    estimate = tuning.estimate_s()
    shown = f"{estimate * 1e3:.3f} ms" if math.isfinite(estimate) else "not yet known"
    print(f"estimate  {shown} (the tuned tasks' best kernels added up)")


def export_model_command(args: argparse.Namespace) -> None:
    from tensortune.model.tuning import model_tuning

    _check_finalists(args.finalists)
    tuning = model_tuning(
        _program(args), args.target, args.storage, prepack_weights=args.prepack_weights,
        winograd=args.winograd, channels_last=args.channels_last,
    )  # fmt: skip
    _export(tuning, args.output, args.finalists)


def _export(tuning: Any, output: str, finalists: int) -> None:
    from tensortune.model.export import export_model

    report = export_model(tuning, output, finalists=finalists)
    checked = tuning.program.reference_name or "TVM's untuned build"
    error = f"max difference {report.max_error:.2g}" if report.max_error is not None else "equal"
    print(f"exported  {report.folder} ({report.tuned_kernels} tuned kernels)")
    picks = [p for p in report.picks if p is not None]
    if picks:
        moved = sum(p.trial != p.finalists[0][0] for p in picks)
        tasks = f"{len(picks)} task" + ("s" if len(picks) > 1 else "")
        print(
            f"finalists {tasks} timed again, each its study's best {finalists} configs: {moved} "
            "built with another than the study's best"
        )
    print(f"checked   against {checked}: {error}")
    print(
        f"latency   {report.tuned_s * 1e3:.3f} ms tuned, {report.untuned_s * 1e3:.3f} ms "
        f"TVM untuned ({report.untuned_s / report.tuned_s:.2f}x)"
    )
