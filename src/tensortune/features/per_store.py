"""TVM MetaSchedule's own program features (``PerStoreFeature``) as a third feature set.

It gives 164 values per buffer store; a config's vector here is the sum and the maximum of its
stores' rows, so that every config of a template has the same length (MetaSchedule's own
model instead predicts per store and sums the predictions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tvm.s_tir import Schedule

    from tensortune.workloads import Workload

#: Values per store in ``PerStoreFeature`` (with ``extract_workload=False``).
STORE_WIDTH = 164
LENGTH = 2 * STORE_WIDTH


class PerStoreExtractor:
    """Runs ``PerStoreFeature`` on scheduled programs of one workload.

    Args:
        workload: The operator at its shape.
        target: A `tvm.target.Target` or target dict; default None: this machine's CPU.
    """

    def __init__(self, workload: Workload, target: Any = None) -> None:
        self.workload = workload
        self.target = target
        self._context: Any = None

    def _setup(self) -> Any:
        import tvm
        from tvm.s_tir import meta_schedule as ms

        from tensortune.target import target_spec

        func = self.workload.prim_func()
        spec = self.target or target_spec("llvm")
        target = spec if isinstance(spec, tvm.target.Target) else tvm.target.Target(spec)
        args = ms.arg_info.ArgInfo.from_prim_func(func)
        return _bare_context(func, target), args, ms.feature_extractor.PerStoreFeature()

    def __call__(self, schedules: Sequence[Schedule]) -> np.ndarray:
        """One row of `LENGTH` values per schedule."""
        from tvm.s_tir import meta_schedule as ms

        if self._context is None:
            self._context = self._setup()
        context, args, extractor = self._context
        out = np.zeros((len(schedules), LENGTH), dtype=np.float32)
        if not schedules:
            return out
        rows = extractor.extract_from(context, [ms.MeasureCandidate(s, args) for s in schedules])
        for i, tensor in enumerate(rows):
            values = tensor.numpy()
            if values.size:
                out[i, :STORE_WIDTH] = values.sum(axis=0)
                out[i, STORE_WIDTH:] = values.max(axis=0)
        return out


def _bare_context(func: Any, target: Any) -> Any:
    """A TuneContext holding only the module and target, which is all the extractor reads.

    The public constructor first imports ``tvm.s_tir.tensor_intrin``, which parses every
    tensor intrinsic's TVMScript: about 30 s here, for nothing this extractor uses.
    """
    import tvm
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule import _ffi_api as ms_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

    from tensortune.target import host_cores

    context = TuneContext.__new__(TuneContext)
    context.__init_handle_by_constructor__(
        ms_api.TuneContext,
        tvm.IRModule({"main": func}),
        target,
        None,  # space generator
        None,  # search strategy
        "main",
        host_cores(),
        -1,  # random state
        get_logging_func(get_logger(__name__)),
    )
    return context
