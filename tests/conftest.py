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


def fresh_oracle(model, inputs, tolerance):
    """An emulate-backend oracle built from scratch: its own graph, samples, FP32 references, backend and an empty
    memo. A test that checks a search's answer asks this one, so that every verdict is evaluated afresh rather
    than read back from the memo of the oracle the search used (which returns the search's own verdicts).

    ``model``: a path or an ``onnx.ModelProto``; ``inputs``: .npz paths or dicts of arrays, one per sample."""
    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.samples import Sample, add_fp32_references, load_samples
    from fp16bisect.evaluation.oracle import Oracle

    graph = Graph(model) if isinstance(model, onnx.ModelProto) else Graph.load(str(model))
    if all(isinstance(i, dict) for i in inputs):
        samples = [Sample(f"sample {k}", dict(arrays)) for k, arrays in enumerate(inputs)]
    else:
        samples = load_samples(graph, [str(i) for i in inputs])
    add_fp32_references(graph, samples)
    return Oracle(EmulateBackend(graph), samples, tolerance, graph.float_output_names())


@pytest.fixture(scope="session", autouse=True)
def override_files_match_their_schema():
    """Every override file the tests make fp16bisect write (a search's result, a command backend's plan file)
    validates against the declared schema: checked where every JSON file is written (``write_json`` calls
    ``files.write_atomic``)."""
    import json

    from fp16bisect.artifacts import files
    from fp16bisect.artifacts.overrides import SCHEMA, problems

    write = files.write_atomic
    marker = f'"schema": "{SCHEMA}"'.encode()  # the first key write_json writes

    def checked(path, data):
        if isinstance(data, bytes) and marker in data[:60]:
            problem = problems(json.loads(data))
            assert not problem, f"fp16bisect wrote an override file the schema refuses: {path} {problem}"
        write(path, data)

    files.write_atomic = checked
    yield
    files.write_atomic = write
