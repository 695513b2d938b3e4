"""tensortune: learn to optimise tensor programs, as an Optuna plugin.

An operator written once as a TVM tensor expression (`tensortune.workloads`) gets a schedule
template whose knobs form an Optuna search space (`tensortune.templates`); `CostModelSampler`
proposes configs from a cost model learned on the features of their loop programs
(`tensortune.features`, `tensortune.cost_model`, `tensortune.search`); each trial builds and
times one schedule (`tensortune.measure`) and lands in Optuna storage.

    import tensortune
    study = tensortune.tune("matmul", shape=dict(M=512, N=512, K=512), n_trials=64)
"""

from tensortune.errors import TensortuneError
from tensortune.export import export_best, load_kernel
from tensortune.measure import MeasureSettings, RpcDevice
from tensortune.sampler import CostModelSampler
from tensortune.templates import CpuTemplate
from tensortune.tuning import Objective, make_sampler, tune
from tensortune.workloads import Workload, get_workload, register_workload

__version__ = "0.1.0"

__all__ = [
    "CostModelSampler",
    "CpuTemplate",
    "MeasureSettings",
    "Objective",
    "RpcDevice",
    "TensortuneError",
    "Workload",
    "export_best",
    "get_workload",
    "load_kernel",
    "make_sampler",
    "register_workload",
    "tune",
]
