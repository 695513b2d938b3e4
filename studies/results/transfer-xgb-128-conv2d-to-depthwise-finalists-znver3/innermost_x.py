"""Where conv2d -> depthwise's cold and warm studies searched: the innermost x tile.

The depthwise template splits the output width (28) into four factors (``tile_x``, e.g.
``1x1x1x28``); the last is the innermost loop, which the template vectorizes when
``inner_axis`` is ``x``. This prints, from the kept 128-trial XGBoost studies:

- per seed and mode, how many trials had each innermost x factor, the factor of the study's
  best trial and the trial that first measured a factor of 28 (with what proposed it);
- pooled over seeds, per mode and factor: trials, median and best GFLOP/s as tuned;
- the innermost x factor of the sources' best configs (the ResNet-18 convolutions).

    python innermost_x.py sqlite:///<work>/transfer.db sqlite:///<work>/sources.db
"""

import collections
import statistics
import sys

import optuna
from optuna.trial import TrialState

SEEDS = range(10)
MODES = (
    "cold", "warm", "warm-explore-local", "warm-design-local",
    "warm-design", "warm-local", "warm-knob", "warm-shared", "warm-validated",
)  # fmt: skip
SOURCES = ("resnet18-c2", "resnet18-c7", "resnet18-c12")
FACTORS = ("1", "2", "4", "7", "14", "28")


def innermost(trial: optuna.trial.FrozenTrial, knob: str = "tile_x") -> str:
    """The last factor of the trial's split `knob`."""
    return str(trial.params[knob]).split("x")[-1]


def complete(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=url)
    return [t for t in study.trials if t.state == TrialState.COMPLETE]


def study_name(mode: str, seed: int) -> str:
    if mode == "cold":
        return f"mobilenet-dw/cold/s{seed}/n128"
    return f"conv2d-to-depthwise/{mode}/s{seed}/n128"


def main(url: str, sources_url: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    pooled: dict[str, dict[str, list[float]]] = {m: collections.defaultdict(list) for m in MODES}
    print("trials per innermost x factor " + "/".join(FACTORS) + "; best's factor; first 28")
    for seed in SEEDS:
        for mode in MODES:
            trials = complete(url, study_name(mode, seed))
            counts = collections.Counter(innermost(t) for t in trials)
            for t in trials:
                pooled[mode][innermost(t)].append(float(t.value))
            best = max(trials, key=lambda t: float(t.value))
            wide = [t for t in trials if innermost(t) == "28"]
            first = "never"
            if wide:
                proposal = wide[0].system_attrs.get("tensortune:proposal") or {}
                first = f"trial {wide[0].number} ({proposal.get('source', '?')})"
            cells = "/".join(str(counts[f]) for f in FACTORS)
            print(
                f"s{seed} {mode:15s} {cells:22s} best {float(best.value):5.1f} GFLOP/s"
                f" at x{innermost(best):2s}; first 28: {first}"
            )
    print("\npooled over seeds: factor: trials, median / best GFLOP/s as tuned")
    for mode in MODES:
        cells = []
        for factor in FACTORS:
            values = pooled[mode][factor]
            if values:
                cells.append(
                    f"{factor}: {len(values)}, {statistics.median(values):.1f} / {max(values):.1f}"
                )
        print(f"{mode:15s} " + "; ".join(cells))
    print("\nthe sources' 8 best configs per study, innermost x factor (their seeds 0-2 pooled)")
    for label in SOURCES:
        counts = collections.Counter()
        for seed in range(3):
            trials = complete(sources_url, f"{label}/costmodel/s{seed}/n64")
            for t in sorted(trials, key=lambda t: -float(t.value))[:8]:
                counts[innermost(t, "tile_x")] += 1
        found = sorted(counts, key=int)  # other widths have other factors
        print(f"{label}: " + ", ".join(f"x{f}: {counts[f]}" for f in found))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
