"""The third state, FP32 accumulation, in every file: the mixed-precision writer (Casts around the node, FP16
tensors on both sides, weights stored in FP16 only), the override JSON (``fp32_accumulate_nodes``, ``accumulate``),
apply, check, the exports' warnings, and the refusal of a mark on a node that does not sum.

Models: tests/accumulation_models.py (one summing culprit each, known by construction) and the sample transformer.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from accumulation_models import CASES, global_pool, layernorm, matmul_cancelling, paddle_layernorm, softmax
from conftest import LN, LN_IN, SAMPLES, one_line_error, run
from onnx import TensorProto

from fp16bisect.artifacts.accumulation import CAST_PREFIX
from fp16bisect.artifacts.mixed import convert
from fp16bisect.artifacts.override_json import overrides_file
from fp16bisect.artifacts.overrides import Overrides, problems, read
from fp16bisect.artifacts.verify import storage_emulation
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import accumulates, accumulating, plan_of
from fp16bisect.model.runtime import session
from fp16bisect.model.weights import inline

F, H = TensorProto.FLOAT, TensorProto.FLOAT16
SMALL = {"layernorm": lambda: layernorm(256), "global_pool": lambda: global_pool(32),
         "softmax": lambda: softmax(3000), "matmul": lambda: matmul_cancelling(256),
         "paddle_layernorm": lambda: paddle_layernorm(16)}


def written(graph: Graph, plan, inputs) -> dict[str, np.ndarray]:
    """ONNX Runtime running the plan's written file faithfully (every FP16 tensor of the file rounded)."""
    names = [o.name for o in graph.outputs]
    model = convert(graph, plan).model
    return dict(zip(names, session(storage_emulation(model), "the written file", basic=True).run(names, inputs)))


@pytest.mark.parametrize("name", list(CASES))
def test_the_marked_node_computes_in_fp32_between_casts_on_fp16_tensors_with_fp16_weights(name):
    case = SMALL[name]()
    graph = Graph(case.model)
    node = graph.by_id[case.culprit]
    mixed = convert(graph, {accumulating(case.culprit)})
    model = mixed.model
    onnx.checker.check_model(inline(model), full_check=True)
    inferred = onnx.shape_inference.infer_shapes(inline(model), strict_mode=True)
    types = Graph(inferred).dtypes
    assert mixed.accumulating == [case.culprit] and mixed.pinned == [] and case.culprit in mixed.fp16_nodes
    proto = next(n for n in model.graph.node if n.name == node.name)
    ups = {n.output[0]: n for n in model.graph.node if n.name.startswith(f"{CAST_PREFIX}{case.culprit}/in/")}
    downs = [n for n in model.graph.node if n.name.startswith(f"{CAST_PREFIX}{case.culprit}/out/")]
    float_inputs = [t for t in node.inputs if graph.is_float(t)]
    # every float input is read through a Cast(to=FLOAT) of an FP16 tensor: the node computes in FP32
    assert sorted(proto.input) == sorted(ups) and len(ups) == len(float_inputs)
    for cast in ups.values():
        assert cast.attribute[0].i == F and types[cast.input[0]] == H and types[cast.output[0]] == F
    # its outputs come back through Cast(to=FLOAT16) into FP16 tensors (the node's own output names, unless a graph
    # output, which the FP32 graph output then casts up again): FP16 for its readers
    outputs = [t for t in node.outputs if graph.is_float(t)]
    graph_outputs = {o.name for o in model.graph.output}
    assert len(downs) == len(outputs)
    for cast, tensor in zip(downs, outputs):
        assert cast.attribute[0].i == H and types[cast.input[0]] == F and types[cast.output[0]] == H
        assert cast.input[0] in proto.output
        assert cast.output[0] == tensor or tensor in graph_outputs
    # weights: stored once, in FP16, cast up inside the file; no FP32 copy of a weight's values
    weights = [t for t in float_inputs if t in {i.name for i in case.model.graph.initializer}]
    stored = {t.name: t for t in model.graph.initializer}
    for w in weights:
        assert stored[w].data_type == H, w
        assert not any(t.data_type == F and t.dims == stored[w].dims for t in model.graph.initializer), w
    names = [o.name for o in graph.outputs]
    session(model).run(names, case.inputs)  # ONNX Runtime runs the file as written


@pytest.mark.parametrize("name", list(CASES))
def test_the_emulator_computes_what_the_file_with_marks_computes(name):
    case = SMALL[name]()
    graph = Graph(case.model)
    backend = EmulateBackend(graph)
    others = [n.id for n in graph.candidates if n.id != case.culprit]
    for plan in (plan_of((), [case.culprit]), plan_of(others, [case.culprit]), plan_of([case.culprit], [case.culprit])):
        emulated = backend.run(plan, case.inputs)
        for output, want in written(graph, plan, case.inputs).items():
            np.testing.assert_allclose(emulated[output], want, rtol=1e-5, atol=1e-6, err_msg=f"{name} {sorted(plan)}")


def test_on_the_transformer_random_marks_and_pins_mean_the_same_in_the_emulator_and_the_file():
    graph = Graph.load(SAMPLES / "transformer_block.onnx")
    data = np.load(SAMPLES / "transformer_block.npz")
    inputs = {v.name: data[v.name] for v in graph.model.graph.input if v.name in data.files}
    backend = EmulateBackend(graph)
    summing = [n.id for n in graph.candidates if accumulates(n.op_type, n.domain)]
    others = [n.id for n in graph.candidates if n.id not in summing]
    rng = np.random.default_rng(4)
    assert len(summing) >= 4
    for _ in range(4):
        plan = plan_of([i for i in others if rng.random() < 0.3], [i for i in summing if rng.random() < 0.6])
        emulated = backend.run(plan, inputs)
        for output, want in written(graph, plan, inputs).items():
            finite = np.isfinite(want)
            assert np.array_equal(np.isfinite(emulated[output]), finite)
            np.testing.assert_allclose(emulated[output][finite], want[finite], rtol=1e-5, atol=1e-6)


def test_a_node_both_pinned_and_marked_is_in_fp32():
    case = SMALL["matmul"]()
    graph = Graph(case.model)
    mixed = convert(graph, plan_of(["matmul"]) | {accumulating("matmul")})
    assert mixed.pinned == ["matmul"] and mixed.accumulating == []
    assert not [n for n in mixed.model.graph.node if n.name.startswith(CAST_PREFIX)]
    assert {t.name: t.data_type for t in mixed.model.graph.initializer}["w"] == F


def test_a_mark_on_a_node_that_does_not_sum_or_is_absent_is_refused_in_one_line():
    graph = Graph(SMALL["matmul"]().model)
    with pytest.raises(UsageError, match=r"'relu' \(Relu\) does not accumulate") as info:
        convert(graph, {accumulating("relu")})
    assert "\n" not in str(info.value)
    with pytest.raises(UsageError, match="'nowhere' .*is not in the model"):
        convert(graph, {accumulating("nowhere")})


# -- the override JSON ----------------------------------------------------------------------------------------------

def plan_file(graph: Graph, members: dict, **more) -> Overrides:
    return overrides_file(graph, members, backend={"name": "emulate"}, tolerance={"atol": 0.01, "rtol": 0.01},
                          search={"status": "plan"}, metrics={}, more=more or None)


def test_the_file_lists_marked_nodes_apart_validates_and_means_the_plan():
    graph = Graph(SMALL["matmul"]().model)
    made = plan_file(graph, {"relu": "", accumulating("matmul"): ""}, accumulate="fp16")
    data = made.to_json()
    assert data["fp32_nodes"] == [{"name": "relu", "op_type": "Relu", "outputs": ["r"], "fp32_profile": ""}]
    assert data["fp32_accumulate_nodes"] == [{"name": "matmul", "op_type": "MatMul", "outputs": ["y"],
                                              "fp32_profile": ""}]
    assert data["accumulate"] == "fp16" and problems(data) == ""
    assert list(data).index("fp32_accumulate_nodes") == list(data).index("fp32_nodes") + 1
    again = Overrides.from_json(json.loads(json.dumps(data)))
    assert again.plan == frozenset({"relu", accumulating("matmul")}) and again.accumulate == "fp16"
    assert [n.name for n in again.fp32_accumulate_nodes] == ["matmul"] and again.names == ["relu"]
    assert "1 FP32-accumulation node" in repr(again)
    data["accumulate"] = "fp8"
    assert "accumulate" in problems(data)
    # a plan's file without marks has only the required sections, as before
    assert "fp32_accumulate_nodes" not in plan_file(graph, {"relu": ""}).to_json()


def test_a_file_written_before_the_keys_existed_still_reads_as_fp32_accumulation_and_no_marks(tmp_path):
    graph = Graph(SMALL["matmul"]().model)
    data = plan_file(graph, {"relu": ""}).to_json()
    assert "accumulate" not in data and "fp32_accumulate_nodes" not in data
    old = Overrides.from_json(data)
    assert old.accumulate == "fp32" and old.fp32_accumulate_nodes == () and old.plan == frozenset({"relu"})


def test_the_exports_leave_marked_nodes_in_fp16_and_say_so_by_name():
    graph = Graph(SMALL["matmul"]().model)
    exports = plan_file(graph, {"relu": "", accumulating("matmul"): ""}).exports
    for export in ("trtexec", "modelopt_autocast"):
        said = [w for w in exports[export]["warnings"] if "FP32 accumulation" in w]
        assert len(said) == 1 and "'matmul'" in said[0] and "exports.strongly_typed" in said[0], export
    assert "matmul" not in exports["trtexec"]["command"]  # not pinned to FP32 there
    assert exports["modelopt_autocast"]["nodes_to_exclude"] == ["^relu$"]


# -- apply and check on a file with marks ---------------------------------------------------------------------------

def transformer_file(tmp_path, fp32: list[str], marked: list[str]):
    """An override file for the sample transformer keeping ``fp32`` in FP32 and ``marked`` in FP32 accumulation."""
    graph = Graph.load(LN)
    path = tmp_path / "o.json"
    members = {**{i: "" for i in fp32}, **{accumulating(i): "" for i in marked}}
    path.write_text(json.dumps(plan_file(graph, members, accumulate="fp32").to_json()))
    return path


def test_apply_writes_and_verifies_a_file_with_a_marked_node_and_check_runs_its_whole_plan(tmp_path, capsys):
    # the answer's two FP32 nodes, and fc1_matmul in FP32 accumulation: the file passes (exit 0) and says so
    path = transformer_file(tmp_path, ["ln1_square", "ln1_var"], ["fc1_matmul"])
    out = tmp_path / "m.onnx"
    code, stdout, err = run(capsys, "apply", path, LN, "-o", out, "--verify", "--inputs", LN_IN)
    assert code == 0, err
    assert "2 pinned in FP32 (ln1_square, ln1_var), 1 in FP32 accumulation (fc1_matmul" in stdout
    assert "verified: the written model meets the tolerance" in stdout
    model = onnx.load(out)
    assert [n.name for n in model.graph.node if n.name.startswith(f"{CAST_PREFIX}fc1_matmul/")]
    code, _, err = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", path)
    assert code == 0, err
    assert "2 node(s) in FP32, 1 in FP32 accumulation" in err
    code, _, _ = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", path, "--json", tmp_path / "c.json", "-q")
    assert code == 0 and json.loads((tmp_path / "c.json").read_text())["overrides"]["accumulating"] == ["fc1_matmul"]


def test_a_mark_is_fp16_storage_so_marking_the_overflowing_variance_instead_of_pinning_it_fails(tmp_path, capsys):
    # ln1_var's output (the variance) passes 65504: in FP32 accumulation it is still stored in FP16, so the file
    # with ln1_var marked instead of pinned fails (exit 1 from check and apply --verify, as the emulator says);
    # ln1_square is a Mul (no sum): a mark there is refused (exit 2, one line)
    weak = transformer_file(tmp_path, ["ln1_square"], ["ln1_var"])
    code, stdout, _ = run(capsys, "apply", weak, LN, "-o", tmp_path / "w.onnx", "--verify", "--inputs", LN_IN)
    assert code == 1 and "NOT verified" in stdout
    code, _, _ = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", weak)
    assert code == 1
    refused = transformer_file(tmp_path, ["ln1_var"], ["ln1_square"])
    code, _, err = run(capsys, "apply", refused, LN, "-o", tmp_path / "r.onnx")
    assert code == 2 and "'ln1_square' (Mul) does not accumulate" in one_line_error(err)
    code, _, err = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", refused)
    assert code == 2 and "does not accumulate" in one_line_error(err)


def test_the_api_results_carry_the_marked_nodes(tmp_path):
    import fp16bisect

    path = transformer_file(tmp_path, ["ln1_square", "ln1_var"], ["fc1_matmul"])
    applied = fp16bisect.apply(LN, str(path), str(tmp_path / "m.onnx"))
    assert [n.name for n in applied.fp32_accumulate_nodes] == ["fc1_matmul"]
    assert [n.name for n in applied.fp32_nodes] == ["ln1_square", "ln1_var"]
    assert "1 FP32-accumulation node: fc1_matmul" in repr(applied)
    checked = fp16bisect.check(LN, LN_IN, str(path))
    assert checked.passed and [n.name for n in checked.accumulating] == ["fc1_matmul"]


def test_a_read_file_keeps_its_marks_through_read(tmp_path):
    path = transformer_file(tmp_path, ["ln1_square"], ["ln1_var"])
    assert read(path).plan == frozenset({"ln1_square", accumulating("ln1_var")})
