"""Measure: build candidates in worker processes, check them against NumPy, time them (on this
host or on a device of a TVM RPC tracker)."""

from tensortune.measure.measurer import Measurer, MeasureResult, MeasurerLike
from tensortune.measure.remote import RpcDevice
from tensortune.measure.settings import MeasureSettings

__all__ = ["MeasureResult", "MeasureSettings", "Measurer", "MeasurerLike", "RpcDevice"]
