"""What optuna-dashboard shows of a tuning study: a note, a live progress plot, and the best
kernel's TIR and generated code as artifacts.

The note and the plot are stored in the study itself (optuna-dashboard keeps them as system
attrs), so any storage a dashboard can open shows them, and a resumed study updates them in
place. Artifact files live in a folder (`optuna.artifacts.FileSystemArtifactStore`) that the
dashboard is pointed at; the storage records which trial each belongs to.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import plotly.graph_objects as go

    from tensortune.templates import Template

#: The progress plot's id: saving under the same id replaces it, so it stays current.
PROGRESS_PLOT_ID = "tensortune-progress"
#: The id of a warm-started study's plot of its sources' weight per model round.
SOURCE_WEIGHTS_PLOT_ID = "tensortune-source-weights"

#: File names of the best kernel's artifacts: its scheduled TIR and the code TVM generated.
KERNEL_TIR, KERNEL_CODE = "kernel_tir.py", "kernel_code.txt"


def study_note(study: optuna.Study, sampler: optuna.samplers.BaseSampler) -> str:
    """Markdown: the workload, shape, target, search space, vendor baseline and the sampler's
    settings."""
    attrs = study.user_attrs
    lines = [
        f"## {attrs.get('workload', study.study_name)}",
        "",
        f"- **operator** `{attrs.get('workload_name', '?')}`, shape "
        f"`{json.dumps(attrs.get('shape', {}))}`, {attrs.get('flop_count', 0) / 1e9:.3g} GFLOP",
        f"- **target** `{attrs.get('target', '?')}`",
        f"- **search space** `{attrs.get('space', 'template')}`",
    ]
    if attrs.get("vendor_gflops"):
        lines.append(
            f"- **vendor** {attrs['vendor_library']}: {attrs['vendor_gflops']:.1f} GFLOP/s "
            f"({attrs['vendor_seconds'] * 1e6:.1f} µs), measured when the study was created"
        )
    else:
        lines.append("- **vendor** no baseline for this operator")
    lines.append(f"- **sampler** `{type(sampler).__name__}` {_sampler_settings(sampler)}")
    if attrs.get("transfer_sources"):
        lines.append(f"- **transfer from** {', '.join(attrs['transfer_sources'])}")
        rounds = source_weight_rounds(study)
        if rounds:
            last = max(r for history in rounds.values() for r, _ in history)
            weights = ", ".join(
                f"`{key}` {dict(history).get(last, 0.0):.2f}" for key, history in rounds.items()
            )
            lines.append(
                f"- **source weights** in round {last} (one source row next to a study row's "
                f"1): {weights}"
            )
    return "\n".join(lines) + "\n"


def _proposals(study: optuna.Study) -> Iterator[dict[str, Any]]:
    """Each trial's ``tensortune:proposal`` attr (empty for a trial without one)."""
    from tensortune.trial_records import PROPOSAL_ATTR

    for trial in study.get_trials(deepcopy=False):
        yield trial.system_attrs.get(PROPOSAL_ATTR) or {}


def source_weight_rounds(study: optuna.Study) -> dict[str, list[tuple[int, float]]]:
    """Per source workload, ``(round, weight)`` of each model round of a warm-started
    `tensortune.CostModelSampler`, read from its trials' ``tensortune:proposal`` attrs; empty
    for a cold study or another sampler."""
    rounds: dict[str, dict[int, float]] = {}
    for proposal in _proposals(study):
        for key, weight in (proposal.get("source_weights") or {}).items():
            rounds.setdefault(key, {})[int(proposal.get("round", 0))] = float(weight)
    return {key: sorted(history.items()) for key, history in rounds.items()}


def model_restart_rounds(study: optuna.Study) -> list[int]:
    """The model rounds of a `tensortune.CostModelSampler` that began fresh networks in place
    of ones that had gone on from earlier rounds (a TreeGRU whose sources had faded), read
    from its trials' ``tensortune:proposal`` attrs; empty where none did."""
    restarted = {int(p.get("round", 0)) for p in _proposals(study) if p.get("model_restarted")}
    return sorted(restarted)


def source_weights_figure(study: optuna.Study) -> go.Figure | None:
    """The weight of each source workload's rows per model round (`source_weight_rounds`),
    with a dotted line at each round that began fresh networks (`model_restart_rounds`); None
    for a study without source weights."""
    rounds = source_weight_rounds(study)
    if not rounds:
        return None
    import plotly.graph_objects as go

    figure = go.Figure()
    for key, history in rounds.items():
        figure.add_trace(go.Scatter(x=[r for r, _ in history], y=[w for _, w in history], name=key))
    for restart in model_restart_rounds(study):
        figure.add_vline(x=restart, line_dash="dot", annotation_text="fresh networks")
    figure.update_layout(
        title="weight of a source row next to a study row's 1, per model round",
        xaxis_title="model round",
        yaxis_title="weight",
    )
    return figure


def _sampler_settings(sampler: optuna.samplers.BaseSampler) -> str:
    settings = getattr(sampler, "settings", None)
    if settings is None:
        return ""
    import dataclasses

    values: dict[str, Any] = {
        "feature_set": getattr(sampler, "feature_set", None),
        "n_startup_trials": getattr(sampler, "n_startup_trials", None),
        **dataclasses.asdict(settings),
        "seed": getattr(sampler, "seed", None),
    }
    return ", ".join(f"{k}={v}" for k, v in values.items() if v is not None)


def progress_figure(study: optuna.Study) -> go.Figure:
    """Each trial's GFLOP/s, the best so far, and the vendor's GFLOP/s as a line."""
    import plotly.graph_objects as go

    trials = sorted(
        study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number
    )
    numbers = [t.number + 1 for t in trials]
    values = [t.value for t in trials]
    best, running = [], float("-inf")
    for value in values:
        running = max(running, value if value is not None else running)
        best.append(running)
    figure = go.Figure()
    figure.add_trace(go.Scatter(x=numbers, y=values, mode="markers", name="trial"))
    figure.add_trace(go.Scatter(x=numbers, y=best, mode="lines", name="best so far"))
    vendor = study.user_attrs.get("vendor_gflops")
    if vendor:
        library = study.user_attrs.get("vendor_library", "vendor")
        figure.add_hline(y=vendor, line_dash="dash", annotation_text=f"{library} {vendor:.1f}")
    figure.update_layout(
        title="best GFLOP/s against trials", xaxis_title="trial", yaxis_title="GFLOP/s"
    )
    return figure


def publish_note(study: optuna.Study, sampler: optuna.samplers.BaseSampler) -> None:
    """Write (or replace) the study's note, and name its objective."""
    import warnings

    from optuna_dashboard import save_note

    save_note(study, study_note(study, sampler))
    with warnings.catch_warnings():  # metric names are "experimental" since Optuna 3.2
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["GFLOP/s"])


def publish_progress(study: optuna.Study) -> None:
    """Save (or replace) the study's progress plot; nothing before the first result. A
    warm-started study also gets its sources' weights per round plotted and in its note."""
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return
    from optuna_dashboard import save_plotly_graph_object

    save_plotly_graph_object(study, progress_figure(study), graph_object_id=PROGRESS_PLOT_ID)
    weights = source_weights_figure(study)
    if weights is not None:
        save_plotly_graph_object(study, weights, graph_object_id=SOURCE_WEIGHTS_PLOT_ID)
        publish_note(study, study.sampler)


def default_artifact_dir(storage: str | None) -> str | None:
    """Where a study's artifacts go unless told: ``<name>-artifacts`` beside a SQLite file
    (``tensortune-artifacts`` for the default ``tensortune.db``); None for a server storage,
    whose workers may not share a folder."""
    from tensortune.storage import DEFAULT_STORAGE

    url = storage or DEFAULT_STORAGE
    if not url.startswith("sqlite:///"):
        return None
    return os.path.splitext(url.removeprefix("sqlite:///"))[0] + "-artifacts"


def artifact_store(folder: str) -> optuna.artifacts.FileSystemArtifactStore:
    """A file-system artifact store in `folder`, created if missing."""
    from tensortune.errors import TensortuneError

    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise TensortuneError(f"cannot use artifact folder {folder}: {err}") from None
    return optuna.artifacts.FileSystemArtifactStore(folder)


def check_artifact_dir(folder: str) -> None:
    """Raise `TensortuneError` unless `folder` is a folder this process can write in, or can
    be created as one; creates nothing (it is asked before a study or the folder exists)."""
    from tensortune.errors import TensortuneError

    shown = folder if folder.isprintable() else repr(folder)
    path = os.path.abspath(folder)
    if os.path.exists(path) and not os.path.isdir(path):
        raise TensortuneError(f"cannot use artifact folder {shown}: it is a file")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise TensortuneError(f"cannot use artifact folder {shown}: {existing} is a file")
    # Permission bits do not say it for root or a read-only mount: try, and leave nothing.
    try:
        probe = tempfile.mkdtemp(prefix=".tensortune-probe-", dir=existing)
    except OSError as err:
        raise TensortuneError(
            f"cannot use artifact folder {shown}: cannot write in {existing} ({err.strerror})"
        ) from None
    os.rmdir(probe)


def kernel_sources(
    template: Template, config: dict[str, Any], target: dict[str, Any]
) -> dict[str, str]:
    """File name → text of `config`'s scheduled TIR and of the code TVM generates for it
    (assembly for llvm; the device source, e.g. CUDA C, for a GPU target)."""
    from tensortune.templates.compile import compile_config

    sch, executable, _ = compile_config(template, config, target)
    module = executable.mod
    code = module.inspect_source("asm") if target.get("kind") == "llvm" else ""
    if not code and module.imports:
        code = module.imports[0].inspect_source()
    return {KERNEL_TIR: sch.mod.script(), KERNEL_CODE: code}


def publish_kernel(
    trial: optuna.Trial,
    template: Template,
    target: dict[str, Any],
    store: optuna.artifacts.FileSystemArtifactStore,
) -> None:
    """Attach `trial`'s TIR and generated code to it as artifacts.

    Call it before the trial is told (Optuna refuses artifacts on finished trials), for a
    trial about to become the study's best, so that every best kernel carries its code.
    """
    from optuna.artifacts import upload_artifact

    sources = kernel_sources(template, dict(trial.params), target)
    with tempfile.TemporaryDirectory(prefix="tensortune-kernel-") as folder:
        for name, text in sources.items():
            path = os.path.join(folder, name)
            with open(path, "w") as f:
                f.write(text)
            upload_artifact(
                artifact_store=store, file_path=path, study_or_trial=trial, mimetype="text/plain"
            )


def serve(
    storage: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    artifact_dir: str | None = None,
    on_ready: Callable[[], object] | None = None,
) -> None:
    """Run optuna-dashboard on `storage` until interrupted.

    Raises `TensortuneError`, with nothing created, for a port out of range, a storage that
    does not exist or an artifact folder that cannot be written.

    Args:
        storage: Optuna storage URL.
        host: Address to listen on. Default ``"127.0.0.1"``: this machine only; give
            ``"0.0.0.0"`` to share it.
        port: Port, 1 to 65535. Default 8080, optuna-dashboard's.
        artifact_dir: Folder of the studies' artifacts (the best kernels' code). Default None:
            `default_artifact_dir` of `storage`; none for a server storage.
        on_ready: Called once every check has passed, just before the server starts (the
            CLI says there where it listens). Default None.
    """
    from optuna_dashboard import run_server

    from tensortune.errors import TensortuneError
    from tensortune.storage import open_storage

    # Every check before the artifact folder is created: a refusal leaves nothing behind.
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise TensortuneError(f"port must be an integer from 1 to 65535, got {port!r}")
    db = open_storage(storage, must_exist=True)
    folder = artifact_dir or default_artifact_dir(storage)
    if folder:
        check_artifact_dir(folder)
    store = artifact_store(folder) if folder else None
    if on_ready is not None:
        on_ready()
    run_server(db, host=host, port=port, artifact_store=store)
