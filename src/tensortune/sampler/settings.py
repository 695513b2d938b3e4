"""How one round of the learned search runs: `RoundSettings`, checked when made."""

from __future__ import annotations

import dataclasses

from tensortune.cost_model import ACQUISITIONS, COST_MODELS, LOSSES
from tensortune.sampler.source_weighting import SOURCE_ROWS, SOURCE_WEIGHTINGS

#: Searches a round can run: ``"evolve"`` (`tensortune.search.evolve`) or ``"anneal"``
#: (`tensortune.search.anneal`, AutoTVM's).
SEARCHES = ("evolve", "anneal")


@dataclasses.dataclass(frozen=True)
class RoundSettings:
    """How one round searches; see `CostModelSampler` for what each field means.

    Raises:
        ValueError: A name outside its choice list, a count below its least value, or a
            share outside [0, 1], with one line naming the field.
    """

    loss: str
    acquisition: str
    n_models: int
    batch_size: int
    candidate_factor: float
    diversity: float | None
    epsilon: float
    n_chains: int
    anneal_steps: int
    restart_share: float
    source_half_life: float = 32.0
    source_weighting: str = "evidence"
    source_rows: str = "drawn"
    cost_model: str = "xgb"
    search: str = "anneal"
    #: `tensortune.search.evolve`'s sizes per round: (n_fresh, population, children,
    #: generations); see `evolve_sizes`.
    evolution: tuple[int, int, int, int] = (4096, 512, 1536, 4)
    explore_share: float = 0.25
    explore_distance: int = 3

    def __post_init__(self) -> None:
        for name, choices in (
            ("cost_model", tuple(COST_MODELS)),
            ("search", SEARCHES),
            ("loss", LOSSES),
            ("acquisition", ACQUISITIONS),
            ("source_weighting", SOURCE_WEIGHTINGS),
            ("source_rows", SOURCE_ROWS),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"unknown {name} {getattr(self, name)!r}; choose one of {', '.join(choices)}"
                )
        for name, least in (
            ("batch_size", 1),
            ("n_chains", 1),
            ("n_models", 1),
            ("anneal_steps", 1),
            ("explore_distance", 1),
        ):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be at least {least}, got {getattr(self, name)}")
        for name in ("epsilon", "restart_share", "explore_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {getattr(self, name)}")
        if not self.source_half_life > 0:
            raise ValueError(f"source_half_life must be positive, got {self.source_half_life}")


def evolve_sizes(cheap_features: bool) -> tuple[int, int, int, int]:
    """(n_fresh, population, children, generations) of an evolution round: about 10^4
    configs scored where features cost microseconds (knob features), about 600 where each
    config is lowered through TVM (5-9 ms), the annealer's budget."""
    return (4096, 512, 1536, 4) if cheap_features else (256, 64, 128, 3)
