"""What optuna-dashboard shows of a tuning study: a note and a live progress plot.

Both are stored in the study itself (optuna-dashboard keeps them as system attrs), so any
storage a dashboard can open shows them, and a resumed study updates them in place.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: The progress plot's id: saving under the same id replaces it, so it stays current.
PROGRESS_PLOT_ID = "tensortune-progress"


def study_note(study: optuna.Study, sampler: optuna.samplers.BaseSampler) -> str:
    """Markdown: the workload, shape, target, vendor baseline and the sampler's settings."""
    attrs = study.user_attrs
    lines = [
        f"## {attrs.get('workload', study.study_name)}",
        "",
        f"- **operator** `{attrs.get('workload_name', '?')}`, shape "
        f"`{json.dumps(attrs.get('shape', {}))}`, {attrs.get('flop_count', 0) / 1e9:.3g} GFLOP",
        f"- **target** `{attrs.get('target', '?')}`",
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
    return "\n".join(lines) + "\n"


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
    """Save (or replace) the study's progress plot; nothing before the first result."""
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return
    from optuna_dashboard import save_plotly_graph_object

    save_plotly_graph_object(study, progress_figure(study), graph_object_id=PROGRESS_PLOT_ID)


def serve(storage: str, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Run optuna-dashboard on `storage` until interrupted.

    Args:
        storage: Optuna storage URL.
        host: Address to listen on. Default ``"127.0.0.1"``: this machine only; give
            ``"0.0.0.0"`` to share it.
        port: Port. Default 8080, optuna-dashboard's.
    """
    from optuna_dashboard import run_server

    from tensortune.storage import open_storage

    run_server(open_storage(storage, must_exist=True), host=host, port=port)
