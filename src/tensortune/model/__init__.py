"""Whole models: import (ONNX, PyTorch), extract the fused TIR tasks, tune them under one trial
budget, and build the model with the best kernels.

    program = load_onnx("resnet18.onnx", [parse_input("input:1x3x224x224")])
    tuning = tune_model(program, total_trials=500)
    write_database(tuning.tasks, tuning.studies, tuning.target, "resnet18-db")
    executable = build(program, tuning.target, "resnet18-db")
"""

from tensortune.model.build import build, check_outputs, run, time_model
from tensortune.model.database import write_database
from tensortune.model.frontend import InputSpec, ModelProgram, from_torch, load_onnx, parse_input
from tensortune.model.tasks import ModelTask, extract_tasks
from tensortune.model.tuning import ModelTuning, tune_model

__all__ = [
    "InputSpec",
    "ModelProgram",
    "ModelTask",
    "ModelTuning",
    "build",
    "check_outputs",
    "extract_tasks",
    "from_torch",
    "load_onnx",
    "parse_input",
    "run",
    "time_model",
    "tune_model",
    "write_database",
]
