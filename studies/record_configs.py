"""Record a dataset of measured configs: random points of a workload's template space, each
built, checked and timed with tensortune's own measure code.

The committed datasets (``tests/data/*.json``) train and test the cost model without a
machine in the loop; ``studies/features.py`` compares the feature sets on them.

    python studies/record_configs.py conv2d 1,32,28,28,64 -n 320 -o tests/data/conv2d_a.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from tqdm.auto import tqdm

from tensortune.measure import Measurer, MeasureSettings
from tensortune.target import describe, target_spec
from tensortune.templates import CpuTemplate, InvalidConfig
from tensortune.workloads import parse_shape


def record(
    workload_name: str, shape: str, n: int, seed: int, settings: MeasureSettings
) -> dict[str, object]:
    """`n` distinct schedulable random configs of the workload and their measured GFLOP/s
    (None for a config that failed to build or run, with the failed stage)."""
    workload = parse_shape(workload_name, shape)
    template = CpuTemplate(workload)
    target = target_spec("llvm")
    rng = random.Random(seed)
    configs: list[dict[str, object]] = []
    seen: set[tuple[object, ...]] = set()
    while len(configs) < n:
        config = {k.name: rng.choice(k.choices) for k in template.knobs}
        key = tuple(config.values())
        if key in seen:
            continue
        seen.add(key)
        try:
            template.apply(config)
        except InvalidConfig:
            continue
        configs.append(config)
    records = []
    start = time.perf_counter()
    with Measurer(template, target, settings) as measurer, tqdm(total=n, unit="config") as bar:
        for i in range(0, n, 16):
            batch = configs[i : i + 16]
            for config, result in zip(batch, measurer.measure(batch), strict=True):
                gflops = None if result.error else workload.flop_count / result.cost / 1e9
                records.append({"config": config, "gflops": gflops, "stage": result.stage})
            bar.update(len(batch))
    return {
        "workload": workload.definition.name,
        "shape": dict(workload.shape),
        "key": workload.key,
        "target": describe(target),
        "seed": seed,
        "seconds": round(time.perf_counter() - start, 1),
        "records": records,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("shape")
    parser.add_argument("-n", type=int, default=320, help="configs (default 320)")
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    settings = MeasureSettings(repeat=3, min_repeat_ms=20)
    data = record(args.workload, args.shape, args.n, args.seed, settings)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output + ".tmp", "w") as f:
        json.dump(data, f, indent=0)
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
