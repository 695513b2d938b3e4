"""Winograd against direct convolution, layer by layer: does `tune_model(winograd=True)` pay here?

Each of ResNet-18's four 3x3 convolutions of stride 1 (64 channels at 56x56, 128 at 28x28, 256
at 14x14, 512 at 7x7; batch 1, with its bias and ReLU) is a one-layer model, tuned by
`tune_model` with the same trials two ways: direct and with Winograd convolutions, both with
packed weights (as ONNX Runtime's). With ``--channels-last`` the builds are channels-last,
unpacked (the default model build), and Winograd is tuned twice, F(4x4) and F(2x2) each
forced (``winograd-4x4``, ``winograd-2x2``), where `tune_model` would choose one per layer
(`tensortune.model.winograd.nhwc_tile`); a layer the rewrite leaves direct (7x7: too few
tiles) has only its direct arm. Each seed's builds are then timed side by side with PyTorch
eager and ONNX Runtime, in round-robin rounds (`model_timing.round_robin`).

    python studies/winograd_layers.py                     # 4 layers, seeds 0 1 2, 64 trials
    python studies/winograd_layers.py --layers c28x128 --seeds 0 --trials 32
    python studies/winograd_layers.py --channels-last --out studies/results/winograd-tiles
    python studies/winograd_layers.py --channels-last --systems direct winograd-4x4 \
        --beside old=studies/work/winograd-old   # beside studies another checkout tuned

Writes under ``--out`` (default ``studies/results/winograd-layers/``): ``winograd_layers.csv``
(per layer, system and seed: µs, GFLOP/s counted as the direct convolution's FLOPs, ÷ direct
of the same seed, tuning seconds) and ``winograd_layers.md`` (medians and every seed). Studies
go to ``--work`` (default ``studies/work/winograd``); a second run resumes them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator

import model_timing
import optuna
import torch
from results_io import write_csv

from tensortune.model import build, check_outputs, from_torch, run, tune_model
from tensortune.model import winograd as winograd_rewrite
from tensortune.model.database import write_database
from tensortune.target import target_spec

HERE = os.path.dirname(os.path.abspath(__file__))
#: ResNet-18's 3x3 convolutions of stride 1: (channels, height = width).
LAYERS = {"c56x64": (64, 56), "c28x128": (128, 28), "c14x256": (256, 14), "c7x512": (512, 7)}
SYSTEMS = ("direct", "winograd")
#: With ``--channels-last``: the NHWC Winograd tile sizes, each forced on every layer.
TILE_SYSTEMS = {"winograd-4x4": 4, "winograd-2x2": 2}


class ConvRelu(torch.nn.Module):
    """One 3x3 convolution of stride 1 with its bias and ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return torch.relu(self.conv(x))


def direct_flops(channels: int, size: int) -> float:
    """Multiply-adds of the direct convolution, times two."""
    return 2.0 * channels * channels * 9 * size * size


@contextlib.contextmanager
def forced_tile(tile: int | None) -> Iterator[None]:
    """NHWC's Winograd rewrite with output tiles of `tile` x `tile` on every layer (None: its
    own choice, `tensortune.model.winograd.nhwc_tile`), while the block runs."""
    chosen = winograd_rewrite.chosen_tile
    if tile is not None:
        winograd_rewrite.chosen_tile = lambda layout, height, width, padding: tile
    try:
        yield
    finally:
        winograd_rewrite.chosen_tile = chosen


def rewrites_the_layer(size: int) -> bool:
    """Whether the Winograd rewrite takes a `size` x `size` layer: too few tiles
    (`tensortune.model.winograd.has_enough_tiles`) leave it direct, so its Winograd arms
    would be second direct ones."""
    return winograd_rewrite.has_enough_tiles(size, size, [1, 1, 1, 1])


def run_layer(layer: str, args: argparse.Namespace) -> list[dict]:
    """Tune `layer` each way for every seed, time the builds side by side, return the rows."""
    channels, size = LAYERS[layer]
    torch.manual_seed(0)
    net = ConvRelu(channels).eval()
    example = [torch.randn(1, channels, size, size)]
    program = from_torch(net, example, name=layer)
    inputs = [t.numpy() for t in example]
    expected = program.reference(inputs)
    target = target_spec("llvm")
    folder = tempfile.mkdtemp(prefix=f"{layer}-")
    calls = dict(model_timing.frameworks(net, example, folder))
    tuning_s: dict[str, float] = {}
    systems = ("direct", *TILE_SYSTEMS) if args.channels_last else SYSTEMS
    systems = tuple(s for s in systems if s in args.systems) if args.systems else systems
    systems = systems if rewrites_the_layer(size) else ("direct",)
    layout = "-nhwc" if args.channels_last else ""
    folders = [("", args.work), *((f"{label}-", work) for label, work in args.beside)]
    for seed in args.seeds:
        for system in systems:
            for label, work in folders:
                key = f"{label}{system}-s{seed}"
                storage = f"sqlite:///{os.path.join(work, f'{layer}{layout}-{system}-s{seed}.db')}"
                start = time.perf_counter()
                with forced_tile(TILE_SYSTEMS.get(system)):
                    tuning = tune_model(
                        program, args.trials, target, storage=storage, seed=seed,
                        prepack_weights=not args.channels_last, winograd=system != "direct",
                        channels_last=args.channels_last, progress=lambda line: None,
                    )  # fmt: skip
                    tuning_s[key] = time.perf_counter() - start  # a resumed run: only its rest
                    database = os.path.join(folder, f"db-{key}")
                    write_database(tuning.tasks, tuning.studies, tuning.target, database)
                    built = build(program, target, database, tuning.rewrites)
                check_outputs(run(built, inputs), expected)
                calls[key] = model_timing.vm_call(built, inputs)
                print(f"{layer} {key}: tuned in {tuning_s[key]:.0f} s", flush=True)
    readers = {name: model_timing.timer(call) for name, call in calls.items()}
    seconds = model_timing.round_robin(readers, args.rounds)
    flops = direct_flops(channels, size)
    rows = []
    for name, s in seconds.items():
        system, _, seed = name.partition("-s")
        direct = seconds.get(f"direct-s{seed}") if seed else None
        rows.append({
            "layer": layer, "system": system, "seed": seed, "us": round(s * 1e6, 1),
            "gflops": round(flops / s / 1e9, 1),
            "x_direct": round(direct / s, 3) if direct else "",
            "tuning_s": round(tuning_s[name], 1) if name in tuning_s else "",
        })  # fmt: skip
    return rows


def summary(rows: list[dict]) -> str:
    """Per layer and system: median µs and GFLOP/s, every seed, and ÷ direct per seed."""
    lines = [
        "| layer | system | median µs | GFLOP/s | per seed µs | ÷ direct per seed |",
        "|---|---|---|---|---|---|",
    ]
    for layer in dict.fromkeys(r["layer"] for r in rows):
        for system in dict.fromkeys(r["system"] for r in rows if r["layer"] == layer):
            mine = [r for r in rows if r["layer"] == layer and r["system"] == system]
            us = round(statistics.median(r["us"] for r in mine), 1)
            gflops = round(statistics.median(r["gflops"] for r in mine), 1)
            seeds = "/".join(str(r["us"]) for r in mine) if len(mine) > 1 else ""
            ratios = "/".join(str(r["x_direct"]) for r in mine if r["x_direct"] != "")
            lines.append(f"| {layer} | {system} | {us} | {gflops} | {seeds} | {ratios} |")
    lines.append(
        "\nGFLOP/s counts the direct convolution's FLOPs for every system, so it compares "
        "time. Each value is the median of the round-robin rounds."
    )
    return "\n".join(lines) + "\n"


def tile_choices(layers: list[str]) -> str:
    """A line naming the tile size `tune_model` chooses for each of `layers` in NHWC."""
    picks = []
    for layer in layers:
        size = LAYERS[layer][1]
        tile = winograd_rewrite.nhwc_tile(size, size, [1, 1, 1, 1])
        picks.append(f"{layer} F({tile}x{tile})" if rewrites_the_layer(size) else f"{layer} direct")
    return f"\n`tune_model`'s own choice in NHWC: {', '.join(picks)}.\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--trials", type=int, default=64, help="per layer and system (64)")
    parser.add_argument("--rounds", type=int, default=model_timing.ROUNDS)
    parser.add_argument(
        "--channels-last", action="store_true",
        help="channels-last builds, unpacked, Winograd F(4x4) and F(2x2) each forced (off)",
    )  # fmt: skip
    parser.add_argument(
        "--systems", nargs="+", default=None, choices=[*SYSTEMS, *TILE_SYSTEMS],
        help="tune and time only these of ours (default: every one the layout has)",
    )  # fmt: skip
    parser.add_argument(
        "--beside", nargs="+", default=[], metavar="LABEL=WORK",
        help="also build each system and seed from the studies in folder WORK (tuned by other "
        "code, say; resumed to --trials) and time it as LABEL-system (default none)",
    )  # fmt: skip
    parser.add_argument("--work", default=os.path.join(HERE, "work", "winograd"))
    parser.add_argument("--out", default=os.path.join(HERE, "results", "winograd-layers"))
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    pairs = [item.partition("=") for item in args.beside]
    if any(not label or not sep or not work or "-s" in label for label, sep, work in pairs):
        parser.error("--beside takes LABEL=WORK, the label without '-s', e.g. old=work/old")
    args.beside = [(label, work) for label, _, work in pairs]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    rows = [row for layer in args.layers for row in run_layer(layer, args)]
    write_csv(os.path.join(args.out, "winograd_layers.csv"), rows)
    text = summary(rows) + (tile_choices(args.layers) if args.channels_last else "")
    with open(os.path.join(args.out, "winograd_layers.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
