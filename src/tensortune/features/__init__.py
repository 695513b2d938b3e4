"""Program features: configs → the loop program they produce → fixed-length vectors."""

from tensortune.features.encodings import curve_features, itervar_features
from tensortune.features.extractor import (
    FEATURE_SETS,
    FeatureExtractor,
    feature_length,
    knob_features,
    knob_features_fit,
)
from tensortune.features.loops import Access, Loop, LoopProgram, Store, loop_program

__all__ = [
    "FEATURE_SETS",
    "Access",
    "FeatureExtractor",
    "Loop",
    "LoopProgram",
    "Store",
    "curve_features",
    "feature_length",
    "itervar_features",
    "knob_features",
    "knob_features_fit",
    "loop_program",
]
