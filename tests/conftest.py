"""Shared helpers: tiny ONNX models built with onnx.helper, the sample models, the command line as a test runs it,
and the one backend double (``fake_backend``; the double itself is in doubles.py)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

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
SAMPLE_MODELS = ["transformer_block", "cnn_batchnorm", "attention_unscaled", "log_underflow", "two_branches",
                 "fp16_safe", "accumulation"]
LN = SAMPLES / "transformer_block.onnx"
LN_IN = SAMPLES / "transformer_block.npz"


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


def shape_model():
    """relu -> Shape -> Gather -> Concat -> Reshape -> sigmoid: an integer shape subgraph between two candidates."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["d0"], name="gather", axis=0),
        helper.make_node("Concat", ["d0", "minus1"], ["new_shape"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "new_shape"], ["rr"], name="reshape"),
        helper.make_node("Sigmoid", ["rr"], ["y"], name="sigmoid"),
    ]
    inits = {"i0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    return make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], inits)


BN_CHANNELS = 4


def conv_bn_relu(var=1e8, gamma=1e4, opset=12, training=False, unknown_rank=False):
    """conv -> BatchNormalization (running variance ``var``) -> relu; gamma/sqrt(var) = 1 by default.
    ``unknown_rank``: the BatchNormalization reads the conv's output through a Reshape whose shape is computed
    (its dims kept where positive: all of them), so shape inference does not know its rank (as in Paddle exports)."""
    rng = np.random.default_rng(0)
    bn_outputs = ["bn_out", "running_mean", "running_var"] if training else ["bn_out"]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv_out", "gamma", "beta", "mean", "var"], bn_outputs, name="bn",
                         **({"training_mode": 1} if training else {})),
        helper.make_node("Relu", ["bn_out"], ["y"], name="relu"),
    ]
    c = BN_CHANNELS
    inits = {"w": rng.normal(size=(c, 3, 3, 3)).astype(np.float32),
             "gamma": np.full(c, gamma, np.float32), "beta": np.linspace(-0.5, 0.5, c).astype(np.float32),
             "mean": np.linspace(-1, 1, c).astype(np.float32), "var": np.full(c, var, np.float32)}
    if unknown_rank:
        nodes[1:1] = [helper.make_node("Shape", ["conv_out"], ["shape"], name="shape"),
                      helper.make_node("Greater", ["shape", "zero"], ["positive"], name="positive"),
                      helper.make_node("NonZero", ["positive"], ["where"], name="nonzero"),
                      helper.make_node("Reshape", ["where", "minus1"], ["kept"], name="kept"),
                      helper.make_node("Gather", ["shape", "kept"], ["dims"], name="dims", axis=0),
                      helper.make_node("Reshape", ["conv_out", "dims"], ["reshaped"], name="reshape")]
        nodes[-2].input[0] = "reshaped"
        inits.update(zero=np.array(0, np.int64), minus1=np.array([-1], np.int64))
    return make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, [1, c, 8, 8])], inits, opset=opset)


def run(capsys, *argv):
    """``fp16bisect ARGV`` in this process: (exit code, stdout, stderr)."""
    from fp16bisect.cli.main import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def journal_of(output, prior: bool = False) -> Path:
    """The one search journal (``prior``: the prior's) beside the override JSON ``output`` (its name carries the
    search's key: ``o.journal-<key>.jsonl``)."""
    output = Path(output)
    found = sorted(output.parent.glob(f"{output.stem}.{'prior.' if prior else ''}journal-*.jsonl"))
    assert len(found) == 1, f"expected one journal beside {output}, found {[p.name for p in found]}"
    return found[0]


def one_line_error(err: str) -> str:
    """The one ``fp16bisect: error:`` line of ``err`` (and no traceback)."""
    lines = [line for line in err.splitlines() if line.startswith("fp16bisect: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def fake_backend(monkeypatch):
    """``fake_backend(**settings)``: from now on every backend the pipeline makes is a FakeBackend of the returned
    ``doubles.Fake``, whose settings a test may change between searches."""
    import fp16bisect.run.pipeline as pipeline
    from doubles import Fake

    def install(**settings) -> Fake:
        fake = Fake(**settings)
        monkeypatch.setattr(pipeline, "make_backend", lambda name, graph, *_: fake.backend(graph))
        return fake

    return install


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


# What a test run may leave in the repository: the tools' own caches and bytecode, never a file of a test's.
TOOL_CACHES = {".git", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache",
               ".import_linter_cache"}


def working_tree() -> dict[str, tuple[int, int]]:
    """Every file of the repository's working tree, the tools' caches aside: path -> (size, modification time), so
    a file overwritten in place (an ignored ``overrides.json``) shows as changed too."""
    found = {}
    for where, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in TOOL_CACHES]
        for name in files:
            path = os.path.join(where, name)
            try:
                stat = os.lstat(path)
            except FileNotFoundError:  # removed while listed
                continue
            found[os.path.relpath(path, ROOT)] = (stat.st_size, stat.st_mtime_ns)
    return found


def differing(before: dict, after: dict) -> list[str]:
    """The files added, removed or changed from ``before`` to ``after`` (``working_tree``'s)."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


AT_START = working_tree()  # before any fixture runs: a session or module fixture's writes count too


def pytest_sessionfinish(session, exitstatus):
    """The run fails when the working tree differs at its end (what a fixture of wider scope than a test left)."""
    changed = differing(AT_START, working_tree())
    if changed:
        print(f"\nthe tests wrote into the repository's working tree {ROOT}: {changed}; write under tmp_path")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def leaves_the_working_tree_alone():
    """A test writes under its tmp_path (``-o``, ``--json``, cwd), never into the repository: a search without
    ``-o`` there overwrote the ``overrides.json`` the README's first command wrote. Fails the test that did."""
    before = working_tree()
    yield
    changed = differing(before, working_tree())
    assert not changed, f"the test wrote into the repository's working tree {ROOT}: {changed}; write under tmp_path"
