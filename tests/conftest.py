"""Shared helpers: tiny ONNX models built with onnx.helper, and the sample models."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import os

import numpy as np
import onnx
import pytest
from hypothesis import settings
from onnx import TensorProto, helper, numpy_helper

# CI (CI=true) draws the same hypothesis examples on every run, so that a landing does not depend on the luck
# of the draw; local runs keep drawing new ones. A counterexample found locally is a bug to fix, not to hide.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    """inputs/outputs: (name, elem_type, shape) triples; initializers: name -> array."""
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


F = TensorProto.FLOAT


def load_make_samples():
    spec = importlib.util.spec_from_file_location("make_sample_models", ROOT / "scripts" / "make_sample_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def known():
    return load_make_samples().KNOWN
