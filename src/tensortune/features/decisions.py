"""Decision-level features of any knob template, computed with NumPy for many configs at once.

MetaSchedule's design space (`tensortune.templates.MetaScheduleTemplate`) has no loop nest we
know ahead of a config, as the CPU template has (`tensortune.features.knob`); lowering each
config through TVM for program features costs 10-15 ms on a convolution, which holds a search
round to a few hundred candidates and made the sampler most of the wall time of a study in
that space. Its knobs are the decisions themselves, though, and they say a lot without TVM: a
tile decision's factors give the extent of every tile level of its loop, and the cumulative
products from the innermost level give the tile's size at each depth, so sums over the loops
that share a level count give each depth's tile volume (the working set a tree model cannot
multiply out of single columns). A row per config, as in AutoTVM's ``knob`` features:

- per tile knob (values like ``"8x4x2x16"``): log2 of each factor, then log2 of the tile
  extent inside each level (the product of that factor and every inner one);
- per numeric knob (unroll budgets, vector lengths, the sketch): log2(1 + value);
- per other knob (compute locations): the choice's position;
- per group of tile knobs with the same number of levels and per depth: the sum of their
  log2 tile extents.

Rows mean something only within one template: a study with prior studies of other workloads
uses program features instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tensortune.templates import Template


def _tile_factors(choices: Sequence[Any]) -> np.ndarray | None:
    """``(n_choices, levels)`` factors of a tile knob's values, or None if they are not tiles."""
    if not choices or not all(isinstance(c, str) for c in choices):
        return None
    try:
        rows = [[int(f) for f in str(c).split("x")] for c in choices]
    except ValueError:
        return None
    if len({len(r) for r in rows}) != 1:
        return None
    return np.array(rows, dtype=np.float64)


class DecisionFeatures:
    """Feature rows of any template's configs, from its knob values alone.

    Args:
        template: Any `tensortune.templates.Template`; its knobs' choices are read once.
    """

    def __init__(self, template: Template) -> None:
        self.template = template
        knobs = list(template.knobs)
        # Per knob, a table (n_choices, columns) that a config's choice index selects a row of.
        self._tables: list[np.ndarray] = []
        # Tile knobs by their number of levels: the first column of each one's tile extents.
        groups: dict[int, list[int]] = {}
        column = 0
        for knob in knobs:
            factors = _tile_factors(knob.choices)
            if factors is not None:
                logs = np.log2(factors)
                inside = np.cumsum(logs[:, ::-1], axis=1)[:, ::-1]  # tile extent per level
                table = np.hstack([logs, inside])
                groups.setdefault(factors.shape[1], []).append(column + factors.shape[1])
            elif all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in knob.choices):
                table = np.log2(1.0 + np.abs(np.array(knob.choices, dtype=np.float64)))[:, None]
            else:
                table = np.arange(len(knob.choices), dtype=np.float64)[:, None]
            self._tables.append(table)
            column += table.shape[1]
        # Columns of the per-knob tile extents that each depth's volume sums, per group.
        self._volumes = [groups[levels] for levels in sorted(groups)]
        self._levels = sorted(groups)
        self.length = column + sum(self._levels)

    def __call__(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Rows of configs given as knob values: a ``(len(configs), length)`` float32 array."""
        from tensortune.templates.knobs import choice_indices

        return self.from_indices(choice_indices(self.template.knobs, configs))

    def from_indices(self, indices: np.ndarray) -> np.ndarray:
        """Rows of configs given as choice indices ``(n, m)`` in the template's knob order."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1, len(self._tables))
        parts = [table[indices[:, j]] for j, table in enumerate(self._tables)]
        rows = np.hstack(parts) if parts else np.zeros((len(indices), 0))
        volumes = [
            sum(rows[:, first + depth] for first in firsts)
            for firsts, levels in zip(self._volumes, self._levels, strict=True)
            for depth in range(levels)
        ]
        if volumes:
            rows = np.hstack([rows, np.stack(volumes, axis=1)])
        return rows.astype(np.float32)
