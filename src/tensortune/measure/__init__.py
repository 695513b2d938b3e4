"""Measure: build candidates in worker processes, check them against NumPy, time them."""

from tensortune.measure.measurer import Measurer, MeasureResult
from tensortune.measure.settings import MeasureSettings

__all__ = ["MeasureResult", "MeasureSettings", "Measurer"]
