"""The learned sampler: cost model + annealing + diverse batches, as an Optuna sampler."""

from tensortune.sampler.cost_model_sampler import CostModelSampler
from tensortune.sampler.history import CONFIG_ATTR, PROPOSAL_ATTR

__all__ = ["CONFIG_ATTR", "PROPOSAL_ATTR", "CostModelSampler"]
