"""The mixed-precision model ``apply`` writes: types where the plan says, Casts only at boundaries."""

import numpy as np
import onnx
import pytest
from conftest import SAMPLE_MODELS as MODELS
from conftest import SAMPLES, F, make_model, shape_model
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from fp16bisect.model import weights
from fp16bisect.model.weights import inline
from fp16bisect.artifacts.verify import storage_emulation, strict, verify
from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.artifacts.mixed import convert
from fp16bisect.model.runtime import session
from fp16bisect.model.samples import add_fp32_references, load_samples
from fp16bisect.tolerance import Tolerance

H = TensorProto.FLOAT16


def types_of(model: onnx.ModelProto) -> dict:
    return Graph(model).dtypes


def ours(model, op="Cast"):
    return [n for n in model.graph.node if n.op_type == op and n.name.startswith("fp16bisect/")]


def assert_implements(graph: Graph, plan, mixed, fp16_io=False):
    """Pinned candidates compute FP32, the others FP16; I/O as asked; each Cast crosses a boundary once."""
    model = mixed.model
    onnx.checker.check_model(inline(model), full_check=True)
    types = types_of(model)
    for node in graph.candidates:
        for t in graph.float_outputs(node):
            if t in {o.name for o in model.graph.output}:
                continue  # renamed: checked through the I/O types below
            assert types[t] == (F if node.id in plan else H), (node.id, t)
    io = H if fp16_io else F
    for v in [*model.graph.input, *model.graph.output]:
        if graph.is_float(v.name):
            assert v.type.tensor_type.elem_type == io, v.name
    seen = set()
    for cast in ours(model):
        source, target = cast.input[0], cast.attribute[0].i
        assert types[source] != target, f"{cast.name} casts {source} to the type it has"
        assert (source, target) not in seen, f"{source} cast twice to {target}"
        seen.add((source, target))


@pytest.mark.parametrize("name", MODELS)
def test_known_plan_all_fp16_and_all_fp32_on_every_sample_model(name, known):
    graph = Graph.load(SAMPLES / f"{name}.onnx")
    everything = [n.id for n in graph.candidates]
    for plan in ([], known[name]["culprits"], everything):
        mixed = convert(graph, plan)
        assert_implements(graph, set(plan), mixed)
        assert sorted(mixed.fp16_nodes) == sorted(set(mixed.fp16_nodes))
    assert convert(graph, everything).casts == 0  # nothing in FP16: nothing to cast, nothing stored in FP16
    assert convert(graph, everything).fp16_constants == 0


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_any_plan_gives_a_valid_model_with_the_plan_s_types(data):
    graph = TRANSFORMER
    ids = [n.id for n in graph.candidates]
    plan = data.draw(st.sets(st.sampled_from(ids)))
    fp16_io = data.draw(st.booleans())
    assert_implements(graph, plan, convert(graph, plan, fp16_io=fp16_io), fp16_io)


TRANSFORMER = Graph.load(SAMPLES / "transformer_block.onnx")


@pytest.mark.parametrize("name", MODELS)
def test_the_written_artifact_meets_the_tolerance_and_all_fp16_does_not(name, known):
    """Part 2: FP16 storage, read from the file itself, not from the search's emulation."""
    spec = known[name]
    graph = Graph.load(SAMPLES / f"{name}.onnx")
    samples = load_samples(graph, [str(SAMPLES / f"{name}.npz")])
    add_fp32_references(graph, samples)
    tol = Tolerance(spec.get("atol", 1e-2), spec.get("rtol", 1e-2))
    outputs = graph.float_output_names()
    culprits = spec["culprits"]
    assert verify(convert(graph, culprits).model, samples, tol, outputs).passed
    fp16 = verify(convert(graph, []).model, samples, tol, outputs)
    assert fp16.passed == (not culprits)
    if culprits:  # the strict bound agrees on these small models
        assert strict(graph.model, convert(graph, culprits).model, samples, tol, outputs).passed


def test_shared_initializer_is_duplicated_fp16_only_converted_in_place_fp32_only_kept():
    w = np.full([4], 3.0, np.float32)
    nodes = [
        helper.make_node("Mul", ["x", "shared"], ["a"], name="fp16_mul"),
        helper.make_node("Mul", ["a", "shared"], ["b"], name="fp32_mul"),
        helper.make_node("Add", ["b", "only16"], ["c"], name="fp16_add"),
        helper.make_node("Add", ["c", "only32"], ["y"], name="fp32_add"),
    ]
    model = make_model(nodes, [("x", F, [4])], [("y", F, [4])],
                       {"shared": w, "only16": w, "only32": w})
    mixed = convert(Graph(model), ["fp32_mul", "fp32_add"]).model
    inits = {t.name: t.data_type for t in mixed.graph.initializer}
    assert inits == {"shared": F, "shared_fp16": H, "only16": H, "only32": F}
    reads = {n.name: list(n.input) for n in mixed.graph.node}
    assert reads["fp16_mul"][1] == "shared_fp16" and reads["fp32_mul"][1] == "shared"


def test_constants_fp16_cannot_hold_are_converted_by_tensorrts_rule_and_reported():
    """Beyond +-65504 saturates, below 2^-24 becomes +-2^-24, +-inf and NaN stay, the rest rounds (IEEE)."""
    values = np.array([1.0, 1e9, -3.4028235e38, 1e-9, -1e-12, np.inf, -np.inf, 2049.0, 0.0], np.float32)
    nodes = [helper.make_node("Add", ["x", "big"], ["y"], name="add_big")]
    model = make_model(nodes, [("x", F, [9])], [("y", F, [9])], {"big": values})
    mixed = convert(Graph(model), [])
    stored = weights.array(mixed.model.graph.initializer[0])
    assert stored.dtype == np.float16
    assert stored.astype(np.float32).tolist() == [1.0, 65504.0, -65504.0, 2.0**-24, -(2.0**-24), np.inf, -np.inf,
                                                  2048.0, 0.0]
    assert [(c.constant, c.saturated, c.lifted, c.extreme, c.readers) for c in mixed.conversions] == [
        ("big", 2, 2, float(np.float32(-3.4028235e38)), ("add_big",))]
    assert "2 value(s) beyond +-65504 (e.g. -3.4e+38) saturated to +-65504" in str(mixed.conversions[0])
    pinned = convert(Graph(model), ["add_big"])
    assert {t.data_type for t in pinned.model.graph.initializer} == {F} and pinned.conversions == []


def test_shape_and_integer_subgraphs_are_untouched():
    """relu -> Shape -> Gather -> Concat -> Reshape(relu) -> sigmoid: the integer path keeps its nodes and types."""
    model = shape_model()
    mixed = convert(Graph(model), ["sigmoid"]).model
    before = {n.name: n for n in model.graph.node}
    after = {n.name: n for n in mixed.graph.node}
    for name in ("shape", "gather", "concat"):
        assert after[name] == before[name]
    types = types_of(mixed)
    assert types["r"] == H and types["rr"] == H and types["new_shape"] == TensorProto.INT64
    # the two boundaries: FP32 input -> FP16 relu, FP16 reshape -> FP32 sigmoid
    assert [n.input[0] for n in ours(mixed)] == ["x", "rr"]


def test_resize_scales_keep_their_type_and_the_model_runs():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Resize", ["r", "", "scales"], ["y"], name="resize", mode="nearest"),
    ]
    model = make_model(nodes, [("x", F, [1, 1, 2, 2])], [("y", F, [1, 1, 4, 4])],
                       {"scales": np.array([1, 1, 2, 2], np.float32)})
    mixed = convert(Graph(model), []).model
    onnx.checker.check_model(inline(mixed), full_check=True)
    assert {t.name: t.data_type for t in mixed.graph.initializer} == {"scales": F}
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    y = session(storage_emulation(mixed)).run(None, {"x": x})[0]
    assert y.shape == (1, 1, 4, 4) and y[0, 0, 3, 3] == 3.0


def test_control_flow_stays_fp32_and_reads_fp16_tensors_through_a_cast():
    then = helper.make_graph([helper.make_node("Neg", ["r"], ["t"], name="neg")], "then", [],
                             [helper.make_tensor_value_info("t", F, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["r"], ["e"], name="ident")], "else", [],
                              [helper.make_tensor_value_info("e", F, [2])])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other),
    ]
    model = make_model(nodes, [("x", F, [2]), ("cond", TensorProto.BOOL, [])], [("y", F, [2])])
    mixed = convert(Graph(model), [])
    onnx.checker.check_model(inline(mixed.model), full_check=True)
    assert any("'if' stays in FP32" in note for note in mixed.notes)
    branch = next(n for n in mixed.model.graph.node if n.op_type == "If").attribute[0].g
    assert branch.node[0].input[0] == "r_fp32"
    x = np.array([70000.0, 1.0], np.float32)
    y = session(storage_emulation(mixed.model)).run(None, {"x": x, "cond": np.array(True)})[0]
    assert np.isinf(y[0]) and y[1] == -1.0  # relu ran in FP16 (70000 -> inf), the branch read it in FP32


def test_fp16_io_and_the_storage_check_round_the_inputs():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])])
    mixed = convert(Graph(model), [], fp16_io=True).model
    assert not ours(mixed)  # FP16 in, FP16 relu, FP16 out: no Cast at all
    assert mixed.graph.input[0].type.tensor_type.elem_type == H


def test_pinning_an_unknown_node_or_one_without_float_output_is_a_usage_error():
    graph = TRANSFORMER
    with pytest.raises(UsageError, match="'no_such_node' is not in the model"):
        convert(graph, ["no_such_node"])
    with pytest.raises(UsageError, match=r"'shape' \(Shape\) has no float output"):
        convert(Graph(shape_model()), ["shape"])


def test_strict_check_reports_instead_of_crashing_when_onnx_reference_cannot_run():
    nodes = [helper.make_node("Gelu", ["x"], ["y"], name="gelu", domain="com.microsoft")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    g = Graph(model)
    samples = load_samples_from({"x": np.array([1.0, 2.0], np.float32)}, g)
    check = strict(model, convert(g, []).model, samples, Tolerance(), ["y"])
    assert not check.passed and check.error.startswith("onnx.reference could not run this model")


def test_strict_check_names_an_error_without_a_message(monkeypatch):
    """An exception with no text is said by its type (it said "MemoryError: str": the text of the text)."""
    import onnx.reference

    def fails(*_):
        raise MemoryError()

    monkeypatch.setattr(onnx.reference, "ReferenceEvaluator", fails)
    g = Graph(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", F, [2])], [("y", F, [2])]))
    check = strict(g.model, convert(g, []).model, load_samples_from({"x": np.ones(2, np.float32)}, g), Tolerance(),
                   ["y"])
    assert check.error == "onnx.reference could not run this model: MemoryError: MemoryError", check.error


def load_samples_from(arrays, graph):
    from fp16bisect.model.samples import Sample

    samples = [Sample("memory", arrays)]
    add_fp32_references(graph, samples)
    return samples


def batchnorm_model(opset):
    """A BatchNormalization whose running variance (1e8) is far beyond FP16, as in PP-OCRv4's detector."""
    c = 2
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn")]
    inits = {"scale": np.ones(c, np.float32), "bias": np.zeros(c, np.float32), "mean": np.zeros(c, np.float32),
             "var": np.full(c, 1e8, np.float32)}
    return make_model(nodes, [("x", F, [1, c, 2, 2])], [("y", F, [1, c, 2, 2])], inits, opset=opset)


def test_batchnorm_statistics_stay_fp32_where_the_opset_lets_them():
    """BatchNormalization-15 types its statistics apart from X: an FP16 BN keeps a 1e8 variance in FP32."""
    mixed = convert(Graph(batchnorm_model(15)), [])
    assert mixed.fp16_nodes == ["bn"]
    assert {t.name: t.data_type for t in mixed.model.graph.initializer} == {
        "scale": F, "bias": F, "mean": F, "var": F}
    onnx.checker.check_model(inline(mixed.model), full_check=True)


def test_batchnorm_statistics_beyond_fp16_in_an_old_opset_are_folded_unless_pinned():
    """BatchNormalization-9 has one type for X and its statistics: FP16 cannot hold a 1e8 variance, so the FP16
    node is written folded (tests/test_bn_fold.py), and pinned it stays a BatchNormalization in FP32."""
    graph = Graph(batchnorm_model(12))
    assert [n.op_type for n in convert(graph, []).model.graph.node] == ["Cast", "Mul", "Add", "Cast"]
    pinned = convert(graph, ["bn"])
    assert pinned.fp16_nodes == [] and [n.op_type for n in pinned.model.graph.node] == ["BatchNormalization"]


def test_the_emulation_does_not_round_batchnorm_statistics():
    """TensorRT folds them into a scale and shift in FP32: a 1e8 variance is no overflow there."""
    from fp16bisect.backends.emulate import EmulateBackend

    x = np.full([1, 2, 2, 2], 1e4, np.float32)
    y = EmulateBackend(Graph(batchnorm_model(15))).run(frozenset(), {"x": x})["y"]
    assert np.allclose(y, 1.0, rtol=1e-3)  # 1e4 / sqrt(1e8); a variance rounded to inf would give 0


def test_a_declared_constant_stored_in_fp16_is_declared_fp16():
    """Exporters declare Constant outputs in value_info (seen in silero-vad): the declaration must follow."""
    nodes = [
        helper.make_node("Constant", [], ["w"], name="anon", value=helper.make_tensor("w", F, [2], [1.0, 2.0])),
        helper.make_node("Mul", ["x", "w"], ["y"], name="mul"),
    ]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])])
    model.graph.value_info.append(helper.make_tensor_value_info("w", F, [2]))
    mixed = convert(Graph(model), []).model
    onnx.checker.check_model(inline(mixed), full_check=True)
    assert mixed.graph.value_info[0].type.tensor_type.elem_type == H


def test_the_storage_check_rounds_fp16_casts_inside_subgraphs_too():
    """A mixed model from another tool may put FP16 inside an If branch: its Casts must still round."""
    then = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["h"], name="to_half", to=H),
         helper.make_node("Cast", ["h"], ["t"], name="to_float", to=F)],
        "then", [], [helper.make_tensor_value_info("t", F, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="ident")], "else", [],
                              [helper.make_tensor_value_info("e", F, [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other)]
    model = make_model(nodes, [("x", F, [2]), ("cond", TensorProto.BOOL, [])], [("y", F, [2])])
    x = np.array([70000.0, 1e-8], np.float32)
    y = session(storage_emulation(model)).run(None, {"x": x, "cond": np.array(True)})[0]
    assert np.isinf(y[0]) and y[1] == 0.0
