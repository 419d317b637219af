"""The FP32 profile gathers its statistics inside the run (row statistics after each tensor or in a Loop over a
group of small tensors, copies for Reshape/Transpose/... outputs, Constant tensors from the file, whole-tensor
fetches for NaN/inf/overflow); the result must be exactly what ``TensorStats.add`` gives on every whole tensor,
which is what the profile computed before."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import F, make_model
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from fp16bisect.model import instrument as I
from fp16bisect.model import profile as P
from fp16bisect.model.graph import Graph
from fp16bisect.model.samples import Sample
from fp16bisect.model.statistics import TensorStats

F32 = np.float32
TINY = float(np.finfo(F32).tiny)  # 2^-126
EDGES = [0.0, -0.0, 1e-40, -1e-40, 1e-45, TINY, -TINY, float(np.nextafter(F32(TINY), F32(0))),
         2.0**-25, float(np.nextafter(F32(2.0**-25), F32(1))), float(np.nextafter(F32(2.0**-25), F32(0))), 2.0**-24,
         float(np.nextafter(F32(2.0**-14), F32(0))), 2.0**-14, -(2.0**-14), 1.0, -3.5, 65504.0, -65504.0,
         float(np.nextafter(F32(65520), F32(0))), 65520.0, -1e6, -3.4028235e38, float("nan"), float("inf"),
         float("-inf")]
FINITE_EDGES = [e for e in EDGES if np.isfinite(e) and abs(e) < 65520]


def edge_model() -> Graph:
    """Tensors that hit every statistic: flushed, subnormal, FP32 denormals, zeros, 65520, NaN (log of a
    negative), inf (division by zero), a Constant weight with values past FP16's range."""
    nodes = [
        helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(
            np.array([1.0, 70000.0, 2.0**-20, 0.0], F32), "w")),
        helper.make_node("Mul", ["x", "w"], ["scaled"], name="scale"),
        helper.make_node("Abs", ["x"], ["ax"], name="abs"),
        helper.make_node("Log", ["x"], ["logx"], name="log"),  # NaN for negatives, -inf at 0
        helper.make_node("Div", ["one", "x"], ["inv"], name="inv"),  # inf at 0
        helper.make_node("Relu", ["x"], ["pos"], name="relu"),
        helper.make_node("Add", ["pos", "ax"], ["y"], name="add"),
    ]
    model = make_model(nodes, [("x", F, [4])], [("y", F, [4]), ("logx", F, [4]), ("inv", F, [4]),
                                                 ("scaled", F, [4])], {"one": np.float32(1.0)})
    return Graph(model)


def reference(graph: Graph, samples) -> dict:
    names = [t for n in graph.nodes for t in n.outputs if graph.is_float(t)]
    names = list(dict.fromkeys([*graph.float_output_names(), *names]))
    stats = {t: TensorStats(t) for t in names}
    P._fetch(graph.runnable_copy(), names, list(enumerate(samples)),
             lambda fresh, i: stats[fresh.name].merge(fresh, i), 256)
    return stats


@pytest.mark.parametrize("grouped", [True, False], ids=["loop over groups", "nodes per tensor"])
@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.sampled_from(EDGES) | st.floats(-1e5, 1e5, width=32), min_size=4, max_size=4),
                min_size=1, max_size=3))
@example(rows=[[1e-40, 0.001, 1.0, 2.0]])  # a row picked for an FP32 denormal only: its min |x| is 0.001
@example(rows=[[2.0**-25, -(2.0**-126), 3.0, 0.0], [1e-45, 2.0**-14, 0.5, -0.0]])
@example(rows=[[3e38, 3e38, -3e38, 1.0]])  # |x| sums past float32's range: finite values all the same
def test_in_run_statistics_equal_whole_tensor_statistics(grouped, rows):
    """Nodes per tensor: only the rows whose min or max says they can hold what a count counts are counted (here
    every tensor is large)."""
    graph = edge_model()
    samples = [Sample("s", {"x": np.array(r, F32)}) for r in rows]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(I, "GROUP_TENSOR", I.GROUP_TENSOR if grouped else 0)
        got = P.profile(graph, samples)
    want = reference(graph, samples)
    for name, stats in want.items():
        assert got.tensors[name] == stats, name


def rows_model(opset: int) -> Graph:
    """Finite tensors of rank 3 (rows of 7) and a scalar, with copies (Transpose, Reshape) whose statistics are
    taken from their input."""
    nodes = [
        helper.make_node("Relu", ["x"], ["pos"], name="relu"),  # zeros: not the minimum over nonzero values
        helper.make_node("Mul", ["x", "half"], ["halved"], name="halve"),  # 2^-126 -> FP32 denormal
        helper.make_node("Transpose", ["halved"], ["moved"], name="move", perm=[2, 0, 1]),
        helper.make_node("Reshape", ["moved", "flat"], ["flat_x"], name="reshape"),
        helper.make_node("Add", ["pos", "x"], ["y"], name="add"),
        helper.make_node("ReduceMax", ["y"], ["total"], name="total", keepdims=0),  # a scalar
    ]
    model = make_model(nodes, [("x", F, [3, 5, 7])], [("flat_x", F, [105]), ("y", F, [3, 5, 7]), ("total", F, [])],
                       {"half": np.float32(0.5), "flat": np.array([-1], np.int64)}, opset=opset)
    return Graph(model)


@pytest.mark.parametrize("opset", [12, 17, 18])
@pytest.mark.parametrize("grouped", [True, False], ids=["loop over groups", "nodes per tensor"])
def test_row_statistics_need_no_whole_tensor_when_values_are_finite(monkeypatch, opset, grouped):
    graph = rows_model(opset)
    rng = np.random.default_rng(opset)
    samples = []
    for _ in range(2):
        x = rng.uniform(-2, 2, size=(3, 5, 7)).astype(F32)
        edges = [e for e in FINITE_EDGES if abs(e) < 16384]  # pos + x stays in FP16's range
        x.flat[rng.choice(x.size, 12, replace=False)] = rng.choice(edges, 12)  # a few rows get small values
        samples.append(Sample("s", {"x": x}))
    want = reference(graph, samples)
    fetched = []
    monkeypatch.setattr(P, "_fetch", lambda model, names, *args: fetched.extend(names))
    monkeypatch.setattr(I, "GROUP_TENSOR", I.GROUP_TENSOR if grouped else 0)
    got = P.profile(graph, samples)
    assert fetched == []  # every statistic came from the instrumented run
    assert set(P._same_values(graph, list(want))) == {"moved", "flat_x"}
    for name, stats in want.items():
        assert got.tensors[name] == stats, name
    assert got.tensors["halved"].subnormal and got.tensors["pos"].min_nonzero > 0


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("grouped", [True, False], ids=["loop over groups", "nodes per tensor"])
def test_statistics_outputs_hold_one_number_per_row_at_most(monkeypatch, opset, grouped):
    """What the instrumented run returns is O(rows) per tensor, never the tensor, even when every row holds
    values below FP16's normal range (the case that used to return the rows whole); a tensor measured in a
    group is one row (at most 2^18 elements: its float32 counts are exact). A tensor of its own has its min
    over |x| >= 2^-126 and its counts taken on the rows that can hold what they count, and only those."""
    from fp16bisect.model.runtime import session

    graph = rows_model(opset)
    x = np.full((3, 5, 7), 2.0**-20, F32)
    x[:, :, 0] = 3.0
    x[0, 0, :] = 2.0  # one row with nothing below FP16's normal range
    x[1, 1, 0] = 7e4  # one row past 65504
    monkeypatch.setattr(I, "GROUP_TENSOR", I.GROUP_TENSOR if grouped else 0)
    names = ["pos", "halved", "y", "total"]
    model, units = I.with_statistics(graph, names, I.tensor_sizes(graph, {"x": x}))
    outputs = [o.name for o in model.graph.output]
    values = dict(zip(outputs, session(model).run(outputs, {"x": x})))
    assert {t for tensors, _ in units for t in tensors} == set(names)
    for tensors, outs in units:
        for t, got in I.split_units(tensors, [values[o] for o in outs]):
            row_max, row_sum, row_min, low_min, low_subnormal, low_flushed, high_finite, shape = got
            want = {"pos": (15, 7), "halved": (15, 7), "y": (15, 7), "total": (1, 1)}[t]
            assert tuple(shape) == ((1, want[0] * want[1]) if grouped else want)
            rows = int(shape[0])
            assert row_max.shape == row_min.shape == (rows,) and row_sum.size == 1
            if t == "total" or grouped:
                continue
            assert low_min.shape == low_subnormal.shape == low_flushed.shape == (14,)  # all rows but the first
            assert (low_subnormal == 6).all() and (low_flushed == 0).all()
            assert high_finite.shape == ((0,) if t == "halved" else (1,))  # 7e4 / 2 fits


@pytest.mark.parametrize("grouped", [True, False], ids=["loop over groups", "nodes per tensor"])
def test_finite_values_past_fp16_are_counted_in_the_run(monkeypatch, grouped):
    """An overflow (the case a search is for) or Hugging Face mask values (-3.4e38, many to a row) need no second
    run: only NaN and inf do."""
    graph = rows_model(17)
    x = np.linspace(-2, 2, 105, dtype=F32).reshape(3, 5, 7)
    x[0, 0, 0], x[1, 2, 3], x[2, 4, 6] = 7e4, -3.4028235e38, 65520.0
    x[1, 2, 4] = -3.4028235e38  # a row of masks whose |x| sums past float32's range: still measured in the run
    samples = [Sample("s", {"x": x})]
    want = reference(graph, samples)
    fetched = []
    monkeypatch.setattr(I, "GROUP_TENSOR", I.GROUP_TENSOR if grouped else 0)
    monkeypatch.setattr(P, "_fetch", lambda model, names, *args: fetched.extend(names))
    got = P.profile(graph, samples)
    assert fetched == []
    for name in ("pos", "halved", "y"):
        assert got.tensors[name] == want[name], name
    assert got.tensors["pos"].overflow == 2 and got.tensors["halved"].overflow == 2  # 7e4/2 fits; 3.4e38/2 not


def test_rows_too_long_for_exact_counts_are_fetched_whole(monkeypatch):
    graph = rows_model(17)
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, size=(3, 5, 7)).astype(F32)
    x.flat[::5] = 2.0**-26
    samples = [Sample("s", {"x": x})]
    want = reference(graph, samples)
    fetched = []
    fetch = P._fetch
    monkeypatch.setattr(P, "_fetch", lambda model, names, *args: (fetched.extend(names), fetch(model, names, *args)))
    monkeypatch.setattr(I, "EXACT_COUNT", 6)  # rows of 7
    got = P.profile(graph, samples)
    assert set(fetched) == {"pos", "halved", "y"}  # the scalar "total" has rows of 1
    for name, stats in want.items():
        assert got.tensors[name] == stats, name


def test_constant_weights_are_measured_and_ranked():
    graph = edge_model()
    prof = P.profile(graph, [Sample("s", {"x": np.array([1.0, 2.0, 3.0, -4.0], F32)})])
    assert prof.tensors["w"].overflow == 1 and prof.tensors["w"].tier == 3
    assert prof.order[0] == "scale"  # it reads the weight FP16 cannot hold


def test_a_model_below_opset_11_falls_back_to_fetching(monkeypatch):
    graph = edge_model()
    for version in (8, 10):  # no ThresholdedRelu (10) or Flatten with a negative axis (11)
        graph.model.opset_import[0].version = version
        assert I.with_statistics(graph, ["y"]) is None
    samples = [Sample("s", {"x": np.array([1.0, -2.0, 0.0, 1e-6], F32)})]
    graph.model.opset_import[0].version = 17
    want = reference(graph, samples)
    monkeypatch.setattr(P, "with_statistics", lambda *args: None)
    got = P.profile(graph, samples)
    assert all(got.tensors[n] == s for n, s in want.items())


def test_constant_folding_is_skipped_only_when_nothing_is_foldable():
    from fp16bisect.model.runtime import nothing_to_fold

    graph = edge_model()  # a Constant node and nodes reading the input: nothing to fold
    assert nothing_to_fold(graph.model)
    folded = make_model([helper.make_node("Mul", ["w", "w"], ["w2"]), helper.make_node("Mul", ["x", "w2"], ["y"])],
                        [("x", F, [2])], [("y", F, [2])], {"w": np.ones(2, F32)})
    assert not nothing_to_fold(folded)  # w * w: a weight computed from weights, which ONNX Runtime folds


def test_a_failing_instrumented_run_starts_over_by_fetching(monkeypatch):
    """ONNX Runtime may accept the instrumented model and still fail to run it on some input: the profile
    then measures every tensor whole, and the statistics of the samples already run are not counted twice."""
    from fp16bisect.errors import UsageError

    graph = rows_model(17)
    rng = np.random.default_rng(0)
    samples = [Sample(f"s{i}", {"x": rng.uniform(-2, 2, size=(3, 5, 7)).astype(F32)}) for i in range(2)]
    want = reference(graph, samples)
    calls = []

    def run(sess, names, feed, what):
        if what == "the model with statistics nodes":
            calls.append(what)
            if len(calls) == 2:  # the second sample
                raise UsageError("ONNX Runtime failed to run the model with statistics nodes")
        return sess.run(names, feed)

    monkeypatch.setattr(P, "run", run)
    got = P.profile(graph, samples)
    assert len(calls) == 2
    for name, stats in want.items():
        assert got.tensors[name] == stats, name


def test_the_profile_run_gives_the_fp32_references_a_sample_lacks():
    """A search computes no references of its own: the profile's FP32 run returns the model's outputs too."""
    from conftest import SAMPLES

    from fp16bisect.model.runtime import session
    from fp16bisect.model.samples import load_samples

    graph = Graph.load(SAMPLES / "transformer_block.onnx")
    samples = load_samples(graph, [str(SAMPLES / "transformer_block.npz")])
    assert samples[0].reference is None
    P.profile(graph, samples)
    plain = session(graph.runnable_copy()).run(None, samples[0].inputs)
    assert set(samples[0].reference) == {o.name for o in graph.outputs}
    np.testing.assert_allclose(samples[0].reference["y"], plain[0], rtol=1e-6, atol=1e-6)


def test_equal_small_constants_become_one_and_the_values_stay():
    """``share_constants`` (what ONNX Runtime's ConstantSharing would do, done once before the session so that its
    graph optimisations do not go over the instrumented graph again): equal small constants, Constant nodes and
    initializers alike, become the first of them; a large one, a graph output and one read inside a subgraph stay."""
    from fp16bisect.model.runtime import session

    big = np.arange(9, dtype=F32)
    nodes = [
        helper.make_node("Constant", [], ["c1"], value=numpy_helper.from_array(np.array([2.0], F32), "c1")),
        helper.make_node("Constant", [], ["c2"], value=numpy_helper.from_array(np.array([2.0], F32), "c2")),
        helper.make_node("Constant", [], ["c3"], value=numpy_helper.from_array(np.array([3.0], F32), "c3")),
        helper.make_node("Mul", ["x", "c1"], ["a"]), helper.make_node("Mul", ["a", "c2"], ["b"]),
        helper.make_node("Add", ["b", "i2"], ["c"]), helper.make_node("Add", ["c", "c3"], ["d"]),
        helper.make_node("Add", ["d", "big1"], ["e"]), helper.make_node("Add", ["e", "big2"], ["y"]),
    ]
    model = make_model(nodes, [("x", F, [9])], [("y", F, [9])],
                       {"i2": np.array([2.0], F32), "big1": big, "big2": big.copy()}, opset=17)
    x = np.linspace(-1, 1, 9, dtype=F32)
    want = session(model).run(None, {"x": x})[0]
    I.share_constants(model)
    kept = [n.output[0] for n in model.graph.node if n.op_type == "Constant"] + [t.name for t in
                                                                                   model.graph.initializer]
    # c1 and c2 hold i2's value (initializers are kept first: they precede every node); 9 elements: left alone
    assert sorted(kept) == ["big1", "big2", "c3", "i2"]
    assert [n.input[1] for n in model.graph.node if n.op_type in ("Mul", "Add")] == ["i2", "i2", "i2", "c3",
                                                                                     "big1", "big2"]
    np.testing.assert_array_equal(session(model).run(None, {"x": x})[0], want)


def test_tensors_that_cannot_be_negative_are_measured_without_a_pass_for_abs():
    """``signs.non_negative``: a Relu's, a Sigmoid's, a Clip's at a minimum >= 0, a product or quotient of such by
    a constant >= 0 and a copy of such are measured on x itself (no Abs over the whole tensor); a Clip at -1, a
    product by a negative constant and a sum are not known to be; the statistics stay those of the whole tensor,
    -0 (which Relu keeps) included."""
    from fp16bisect.model.signs import non_negative

    nodes = [
        helper.make_node("Relu", ["x"], ["relu"]), helper.make_node("Sigmoid", ["x"], ["sig"]),
        helper.make_node("Clip", ["x", "zero", "six"], ["clip"]), helper.make_node("Clip", ["x", "minus"], ["neg"]),
        helper.make_node("Div", ["clip", "six"], ["scaled"]), helper.make_node("Mul", ["relu", "minus"], ["flip"]),
        helper.make_node("Transpose", ["scaled"], ["moved"]), helper.make_node("Add", ["relu", "sig"], ["sum"]),
        helper.make_node("Mul", ["sum", "moved"], ["y"]),
    ]
    graph = Graph(make_model(nodes, [("x", F, [2, 2])], [("y", F, [2, 2]), ("flip", F, [2, 2]), ("neg", F, [2, 2])],
                             {"zero": np.float32(0), "six": np.float32(6), "minus": np.float32(-1)}))
    assert non_negative(graph) == {"relu", "sig", "clip", "scaled", "moved"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(I, "GROUP_TENSOR", 0)
        model, _ = I.with_statistics(graph, ["relu", "sig", "clip", "neg", "scaled", "flip", "sum", "y"])
    whole = {n.input[0] for n in model.graph.node if n.op_type == "Abs" and not n.input[0].startswith(I.PREFIX)}
    assert whole == {"neg", "flip", "sum", "y"}
    samples = [Sample("s", {"x": np.array([[-0.0, -2.0], [1e-40, 7.0]], F32)}),
               Sample("t", {"x": np.array([[0.0, 2.0**-20], [-3.0, 2.0**-26]], F32)})]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(I, "GROUP_TENSOR", 0)
        got = P.profile(graph, samples)
    for name, stats in reference(graph, samples).items():
        assert got.tensors[name] == stats, name


def test_an_initializer_a_run_can_feed_is_never_taken_for_a_statistics_constant():
    """``scale`` is an initializer and an input: it holds the constant c the statistics divide by |x| to tell FP32
    denormals from normal values (c / |x| overflows exactly below 2^-126), but a run feeds 1.0. The statistics'
    constants are their own, so the denormal 2^-127 still counts as a zero: the smallest value is 1e-3."""
    nodes = [helper.make_node("Mul", ["x", "scale"], ["y"], name="mul")]
    model = make_model(nodes, [("x", F, [4]), ("scale", F, [])], [("y", F, [4])],
                       {"scale": np.float32(I.OVERFLOWS_BELOW_NORMAL)})
    graph = Graph(model)
    samples = [Sample("s", {"x": np.array([2.0**-127, 1e-3, 0.5, 3.0], F32), "scale": np.array(1.0, F32)})]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(I, "GROUP_TENSOR", 0)
        got = P.profile(graph, samples)
    assert got.tensors["y"].min_nonzero == np.float32(1e-3)
    for name, stats in reference(graph, samples).items():
        assert got.tensors[name] == stats, name
