"""The learned sampler: cost model + annealing + diverse batches, as an Optuna sampler."""

from tensortune.sampler.cost_model_sampler import CostModelSampler

__all__ = ["CostModelSampler"]
