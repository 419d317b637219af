"""The emulator's FP16 accumulation (``--accumulate fp16``, backends/emulate/accumulate.py): sums past 65504 overflow
in the FP16 state, not in FP32 accumulation nor in FP32; each modelled op agrees with FP32 where its sums fit; the
default (fp32) emulation is today's, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from accumulation_models import CASES
from conftest import make_model
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.backends.emulate.rewrite import Emulation
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import plan_of

F = TensorProto.FLOAT
SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"


def _sum_model(depth: int):
    """relu -> ReduceMean over ``depth`` values (opset 18: axes an input)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r", "axes"], ["y"], name="sum", keepdims=0)]
    return make_model(nodes, [("x", F, [2, depth])], [("y", F, [2])], {"axes": np.array([1], np.int64)}, opset=18)


@pytest.mark.parametrize("value, finite", [(16.0, False), (15.0, True)])
def test_a_sum_of_non_negative_terms_overflows_once_its_total_passes_the_max(value, finite):
    """A mean of 4096 terms of 16: their total 65536 passes 65504 (inf in FP16 accumulation, whatever the order);
    of 15, 61440 fits (exact). In FP32 accumulation, in FP32, and under --accumulate fp32 the mean is 16."""
    x = np.full((2, 4096), value, np.float32)
    graph = Graph(_sum_model(4096))
    summed = EmulateBackend(graph, accumulate="fp16").run(frozenset(), {"x": x})["y"]
    assert np.isfinite(summed).all() == finite
    if finite:
        assert summed.tolist() == [15.0, 15.0]
    fp16 = EmulateBackend(graph, accumulate="fp16")
    for plan in (plan_of(accumulate=["sum"]), plan_of(fp32=["sum"])):
        assert fp16.run(plan, {"x": x})["y"].tolist() == [value] * 2
    assert EmulateBackend(graph).run(frozenset(), {"x": x})["y"].tolist() == [value] * 2


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_accumulation_model_fails_only_with_its_culprit_adding_in_fp16(name):
    """The four models of accumulation_models.py: the all-FP16 plan misses atol 0.01 by far with FP16 sums; the
    culprit in FP32 accumulation (a mark) or in FP32 (a pin) meets it, and so does every plan under fp32."""
    case = CASES[name]()
    graph = Graph(case.model)
    reference = EmulateBackend(graph).run(frozenset(n.id for n in graph.candidates), case.inputs)
    fp16 = EmulateBackend(graph, accumulate="fp16")

    def error(backend, plan) -> float:
        got = backend.run(plan, case.inputs)
        return max(float(np.max(np.abs(np.nan_to_num(got[k], nan=1e9, posinf=1e9) - v))) for k, v in reference.items())

    assert error(fp16, frozenset()) > 0.4
    assert error(fp16, plan_of(accumulate=[case.culprit])) < 0.01
    assert error(fp16, plan_of(fp32=[case.culprit])) < 0.01
    assert error(EmulateBackend(graph), frozenset()) < 0.01


def _agrees(nodes, inputs, outputs, initializers, feed, opset=17):
    """The FP16-accumulated result of a model whose sums fit: within FP16 rounding of the FP32 one."""
    graph = Graph(make_model(nodes, inputs, outputs, initializers, opset=opset))
    fp16 = EmulateBackend(graph, accumulate="fp16")
    assert fp16.emulation.accumulators, "the op's sums were not modelled"
    summed = fp16.run(frozenset(), feed)
    storage = EmulateBackend(graph).run(frozenset(), feed)
    for k, v in storage.items():
        assert summed[k].shape == v.shape
        np.testing.assert_allclose(summed[k], v, rtol=0.02, atol=0.02 * float(np.abs(v).max()))
    return graph


def test_modelled_ops_agree_with_fp32_where_their_sums_fit():
    """Layouts: MatMul with batch broadcasting, Gemm transposed with C, grouped Conv with bias (with few channels,
    and with 20 channels a group under auto_pad SAME_UPPER, SAME_LOWER and VALID, strides and dilations), a Conv
    with uneven pads on an input of symbolic size, a reduction over
    two middle axes, Softmax and LogSoftmax on a middle axis, LayerNormalization over two axes, GlobalAveragePool."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (2, 3, 5, 40)).astype(np.float32)
    _agrees([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], [("a", F, [2, 3, 5, 40])],
            [("y", F, [2, 3, 5, 7])], {"b": rng.uniform(-1, 1, (40, 7)).astype(np.float32)}, {"a": a})
    _agrees([helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", transA=1, transB=1, alpha=0.5, beta=2.0)],
            [("a", F, [50, 6])], [("y", F, [6, 4])],
            {"b": rng.uniform(-1, 1, (4, 50)).astype(np.float32), "c": rng.uniform(-1, 1, (4,)).astype(np.float32)},
            {"a": rng.uniform(-1, 1, (50, 6)).astype(np.float32)})
    x = rng.uniform(-1, 1, (1, 8, 9, 9)).astype(np.float32)
    _agrees([helper.make_node("Conv", ["x", "w", "bias"], ["y"], name="conv", group=2, pads=[1, 1, 1, 1])],
            [("x", F, [1, 8, 9, 9])], [("y", F, [1, 6, 9, 9])],
            {"w": rng.uniform(-1, 1, (6, 4, 3, 3)).astype(np.float32), "bias": np.arange(6, dtype=np.float32)},
            {"x": x})
    _agrees([helper.make_node("Conv", ["x", "w"], ["y"], name="conv1x1")], [("x", F, [1, 40, 5, 5])],
            [("y", F, [1, 3, 5, 5])], {"w": rng.uniform(-1, 1, (3, 40, 1, 1)).astype(np.float32)},
            {"x": rng.uniform(-1, 1, (1, 40, 5, 5)).astype(np.float32)})
    x40 = rng.uniform(-1, 1, (1, 40, 9, 10)).astype(np.float32)  # 20 channels a group: blocks of 16 and 4 per tap
    for auto_pad, strides, dilations, out in (("SAME_UPPER", [2, 2], [1, 1], [5, 5]), ("SAME_LOWER", [2, 3], [1, 1],
                                                                                      [5, 4]),
                                              ("VALID", [1, 2], [2, 1], [5, 4])):  # no dilation with SAME in ORT
        _agrees([helper.make_node("Conv", ["x", "w", "bias"], ["y"], name="conv_" + auto_pad, group=2,
                                  auto_pad=auto_pad, strides=strides, dilations=dilations)],
                [("x", F, [1, 40, 9, 10])], [("y", F, [1, 6, *out])],
                {"w": rng.uniform(-1, 1, (6, 20, 3, 3)).astype(np.float32), "bias": np.ones(6, np.float32)},
                {"x": x40})
    _agrees([helper.make_node("Conv", ["x", "w"], ["y"], name="conv_pads", pads=[2, 0, 1, 3], strides=[3, 1],
                              dilations=[1, 3])],
            [("x", F, [1, 40, "h", "w"])], [("y", F, None)], {"w": rng.uniform(-1, 1, (2, 40, 3, 2)).astype(np.float32)},
            {"x": x40})
    r = rng.uniform(0, 1, (2, 6, 7, 3)).astype(np.float32)
    for op in ("ReduceMean", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceL1", "ReduceLogSum"):
        _agrees([helper.make_node(op, ["r"], ["y"], name="reduce", axes=[1, 2], keepdims=1)], [("r", F, [2, 6, 7, 3])],
                [("y", F, [2, 1, 1, 3])], {}, {"r": r}, opset=13)
    for op in ("Softmax", "LogSoftmax"):
        _agrees([helper.make_node(op, ["r"], ["y"], name="softmax", axis=1)], [("r", F, [2, 6, 7, 3])],
                [("y", F, [2, 6, 7, 3])], {}, {"r": r * 10})
    _agrees([helper.make_node(op, ["r"], ["y"], name="softmax11", axis=1)], [("r", F, [2, 6, 7, 3])],
            [("y", F, [2, 6, 7, 3])], {}, {"r": r * 10}, opset=11)
    _agrees([helper.make_node("LayerNormalization", ["r", "s", "b"], ["y"], name="ln", axis=2)],
            [("r", F, [2, 6, 7, 3])], [("y", F, [2, 6, 7, 3])],
            {"s": rng.uniform(0.5, 1, (7, 3)).astype(np.float32), "b": np.ones((7, 3), np.float32)}, {"r": r})
    _agrees([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], [("x", F, [1, 8, 9, 9])],
            [("y", F, [1, 8, 1, 1])], {}, {"x": x})


def test_a_conv_whose_running_sum_passes_the_max_overflows_in_fp16_accumulation():
    """A 3x3 convolution over 1024 channels of 16, its terms summed tap by tap, 16 channels of one tap a block (the
    order of an implicit-GEMM kernel): weights +1 on the first four taps, -1 on the next four and 0 on the last,
    the output is 0, but the first four taps' sum (the first 256 of 576 partials) is 65536 (the next four's
    -65536): not finite with FP16 sums, exact in FP32 accumulation. Weights +1 on the first 512 channels and -1 on the others cancel within
    each tap (8192 at most): 0 with FP16 sums too (a model adding each channel's 9 taps first, as this one did
    before, overflowed there: 512 x 9 x 16 = 73728)."""
    x = np.full((1, 1024, 3, 3), 16.0, np.float32)
    by_tap = np.array([1, 1, 1, 1, -1, -1, -1, -1, 0], np.float32).reshape(1, 1, 3, 3)
    by_channel = np.concatenate([np.ones((1, 512, 3, 3)), -np.ones((1, 512, 3, 3))], axis=1).astype(np.float32)
    for w, finite in ((np.broadcast_to(by_tap, (1, 1024, 3, 3)).copy(), False), (by_channel, True)):
        graph = Graph(make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                                 [("x", F, [1, 1024, 3, 3])], [("y", F, [1, 1, 1, 1])], {"w": w}))
        fp16 = EmulateBackend(graph, accumulate="fp16")
        y = fp16.run(frozenset(), {"x": x})["y"]
        assert np.isfinite(y).all() == finite and (not finite or y.item() == 0.0)
        assert fp16.run(plan_of(accumulate=["conv"]), {"x": x})["y"].item() == 0.0


def test_a_conv_over_few_channels_adds_whole_taps_in_a_block():
    """Two channels, 3x3: a block is 8 whole taps (16 terms), the last tap a block of its own. Weights 8192 on the
    first four taps and -8192 on the next four cancel inside the first block (its FP32 sum is 0): the output, 4
    from the last tap, is exact with FP16 sums. Weights 4096 on the first eight taps and -32768 on the last: each
    block's sum (65536, -65536) passes 65504, NaN with FP16 sums, 0 in FP32 accumulation."""
    x = np.ones((1, 2, 3, 3), np.float32)
    inside = np.array([1, 1, 1, 1, -1, -1, -1, -1, 0], np.float32) * 8192 + np.array([0] * 8 + [2], np.float32)
    across = np.array([4096] * 8 + [-32768], np.float32)
    for taps, expected in ((inside, 4.0), (across, None)):
        w = np.broadcast_to(taps.reshape(1, 1, 3, 3), (1, 2, 3, 3)).copy()
        graph = Graph(make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                                 [("x", F, [1, 2, 3, 3])], [("y", F, [1, 1, 1, 1])], {"w": w}))
        fp16 = EmulateBackend(graph, accumulate="fp16")
        y = fp16.run(frozenset(), {"x": x})["y"].item()
        assert y == expected if expected is not None else np.isnan(y)
        assert fp16.run(plan_of(accumulate=["conv"]), {"x": x})["y"].item() == (expected or 0.0)


def test_the_ops_not_modelled_are_said_once():
    """An Einsum keeps FP32 sums in the emulation: a notice names it, once, when the emulation is set up."""
    said = []
    nodes = [helper.make_node("Einsum", ["a", "b"], ["y"], name="einsum", equation="ij,jk->ik"),
             helper.make_node("ReduceSum", ["y"], ["z"], name="short", axes=[1], keepdims=1)]
    graph = Graph(make_model(nodes, [("a", F, [2, 30]), ("b", F, [30, 3])], [("z", F, [2, 1])], opset=12))
    backend = EmulateBackend(graph, accumulate="fp16", notify=said.append)
    feed = {"a": np.ones((2, 30), np.float32), "b": np.ones((30, 3), np.float32)}
    backend.run(frozenset(), feed)
    backend.run(frozenset(), feed)
    assert len(said) == 1 and "short" not in said[0], said
    assert "(Einsum, its FP16 accumulation is not modelled: einsum)" in said[0], said
    assert "'fp16bisect scan' shows their accumulator headroom" in said[0], said
    assert backend.emulation.accumulators == []  # the reduction sums 3 terms: one block, nothing to model


@pytest.mark.parametrize("name", ["transformer_block", "cnn_batchnorm", "attention_unscaled", "loudness"])
def test_accumulate_fp32_is_todays_emulation_bit_for_bit(name):
    """The same emulation model (no extra node, no extra mask entry) as an Emulation made without the option, and
    bit-identical outputs on the sample model's plans."""
    graph = Graph.load(SAMPLES / f"{name}.onnx")
    assert Emulation(graph, accumulate="fp32").model.SerializeToString() == Emulation(graph).model.SerializeToString()
    feed = dict(np.load(SAMPLES / f"{name}.npz"))
    today, fp32 = EmulateBackend(graph), EmulateBackend(graph, accumulate="fp32")
    ids = [n.id for n in graph.candidates]
    for plan in (frozenset(), frozenset(ids[::2]), frozenset(ids)):
        for k, v in today.run(plan, feed).items():
            assert fp32.run(plan, feed)[k].tobytes() == v.tobytes()


def test_a_summed_length_known_only_when_the_model_runs_is_modelled_too():
    """Over a dynamic width: a pooled sum of 2 x 128 x 128 values of 4 to 6 (about 81920) is not finite in FP16
    accumulation and fits in FP32 accumulation; a mean, a softmax and a LayerNorm over 300 agree with FP32."""
    rng = np.random.default_rng(1)
    x = rng.uniform(4, 6, (1, 2, 128, 128)).astype(np.float32)
    graph = Graph(make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")],
                             [("x", F, [1, 2, "h", "w"])], [("y", F, [1, 2, 1, 1])]))
    fp16 = EmulateBackend(graph, accumulate="fp16")
    assert not np.isfinite(fp16.run(frozenset(), {"x": x})["y"]).any()
    np.testing.assert_allclose(fp16.run(plan_of(accumulate=["gap"]), {"x": x})["y"], x.mean(axis=(2, 3), keepdims=True),
                               rtol=1e-3)
    r = {"r": rng.uniform(0, 1, (2, 300)).astype(np.float32)}
    _agrees([helper.make_node("ReduceMean", ["r"], ["y"], name="mean", axes=[1], keepdims=1)], [("r", F, [2, "n"])],
            [("y", F, [2, 1])], {}, r, opset=13)
    _agrees([helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)], [("r", F, [2, "n"])],
            [("y", F, [2, "n"])], {}, r)
    _agrees([helper.make_node("LayerNormalization", ["r", "s"], ["y"], name="ln", axis=-1)], [("r", F, [2, "n"])],
            [("y", F, [2, "n"])], {"s": np.ones(300, np.float32)}, r)


@pytest.mark.parametrize("op, opset, scale", [("InstanceNormalization", 17, 4), ("GroupNormalization", 18, 2),
                                              ("GroupNormalization", 21, 4)])
def test_instance_and_group_normalisation(op, opset, scale):
    """Their statistics agree with FP32 where the sums fit (opset 18's GroupNormalization scales per group, 21's
    per channel); over 4 channels x 64 x 64 values of +-5 (group of 2 channels: 8192 squares of 25) the sum of
    squares passes 65504: zeros instead of +-1 in FP16 accumulation, +-1 in FP32 accumulation."""
    rng = np.random.default_rng(2)
    attrs = {"num_groups": 2} if op == "GroupNormalization" else {}
    inits = {"s": rng.uniform(0.5, 1, scale).astype(np.float32), "b": rng.uniform(0, 1, scale).astype(np.float32)}
    nodes = [helper.make_node(op, ["x", "s", "b"], ["y"], name="norm", **attrs)]
    _agrees(nodes, [("x", F, [2, 4, 5, 6])], [("y", F, [2, 4, 5, 6])], inits,
            {"x": rng.uniform(-1, 1, (2, 4, 5, 6)).astype(np.float32)}, opset=opset)
    ones = {"s": np.ones(scale, np.float32), "b": np.zeros(scale, np.float32)}
    graph = Graph(make_model(nodes, [("x", F, [1, 4, 64, 64])], [("y", F, [1, 4, 64, 64])], ones, opset=opset))
    x = {"x": np.where(rng.random((1, 4, 64, 64)) < 0.5, 5.0, -5.0).astype(np.float32)}
    fp16 = EmulateBackend(graph, accumulate="fp16")
    assert np.abs(fp16.run(frozenset(), x)["y"]).max() < 0.5
    np.testing.assert_allclose(np.abs(fp16.run(plan_of(accumulate=["norm"]), x)["y"]), 1.0, rtol=0.05)


def test_a_sum_whose_rank_shape_inference_does_not_know_is_modelled_from_the_run():
    """The Paddle-style decomposed LayerNorm (no tensor after its Reshape has a rank by shape inference): both
    ReduceMeans are modelled from the ranks the run shows; the variance's sum (102400) is not finite in FP16
    accumulation, and nothing is said to be left unmodelled."""
    case = CASES["paddle_layernorm"]()
    graph = Graph(case.model)
    assert graph.ranks.get("square") is None
    said: list[str] = []
    fp16 = EmulateBackend(graph, accumulate="fp16", notify=said.append)
    assert np.abs(fp16.run(frozenset(), case.inputs)["y"]).max() < 0.5  # x / inf: zeros, not +-1
    modelled = {graph.candidates[i].id for i in fp16.emulation.accumulators}
    assert modelled == {"mean", "variance"} and fp16.emulation.unmodelled == [] and said == []
    fp32 = EmulateBackend(graph).run(frozenset(n.id for n in graph.candidates), case.inputs)["y"]
    np.testing.assert_allclose(fp16.run(plan_of(accumulate=["variance"]), case.inputs)["y"], fp32, atol=0.01)


def test_conv_transpose_overflows_where_its_running_sum_passes_the_max_and_agrees_where_it_fits():
    """A 2x2, stride-2 ConvTranspose over 1024 channels of 200, weights +1 on the first 512 and -1 on the others:
    each output is 0, but the first half's sum is 102400: not finite with FP16 sums, exact in FP32 accumulation.
    Grouped, padded and strided with an output padding, it agrees with FP32 where its sums fit."""
    x = np.full((1, 1024, 2, 2), 200.0, np.float32)
    w = np.concatenate([np.ones((512, 1, 2, 2)), -np.ones((512, 1, 2, 2))]).astype(np.float32)
    graph = Graph(make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2])],
                             [("x", F, [1, 1024, 2, 2])], [("y", F, [1, 1, 4, 4])], {"w": w}))
    fp16 = EmulateBackend(graph, accumulate="fp16")
    assert not np.isfinite(fp16.run(frozenset(), {"x": x})["y"]).any()
    assert fp16.run(plan_of(accumulate=["up"]), {"x": x})["y"].tolist() == np.zeros((1, 1, 4, 4)).tolist()
    rng = np.random.default_rng(5)
    _agrees([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up", group=2, strides=[2, 2],
                              pads=[1, 1, 1, 1], output_padding=[1, 1])],
            [("x", F, [1, 40, 5, 5])], [("y", F, [1, 6, 10, 10])],
            {"w": rng.uniform(-1, 1, (40, 3, 3, 3)).astype(np.float32), "b": np.arange(6, dtype=np.float32)},
            {"x": rng.uniform(-1, 1, (1, 40, 5, 5)).astype(np.float32)})


def test_a_matmul_whose_summed_length_is_known_only_when_the_model_runs():
    """Two activations of symbolic dims (attention's q @ k and p @ v in exports without static shapes): agrees with
    FP32 where the sums fit, and a dot product of 4096 terms of 20 (81920) is not finite."""
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    inputs = [("a", F, [2, "m", "k"]), ("b", F, [2, "k", "n"])]
    _agrees(nodes, inputs, [("y", F, [2, "m", "n"])], {},
            {"a": rng.uniform(-1, 1, (2, 3, 45)).astype(np.float32), "b": rng.uniform(-1, 1, (2, 45, 4)).astype(np.float32)})
    graph = Graph(make_model(nodes, inputs, [("y", F, [2, "m", "n"])]))
    feed = {"a": np.ones((2, 1, 4096), np.float32), "b": np.full((2, 4096, 1), 20.0, np.float32)}
    assert not np.isfinite(EmulateBackend(graph, accumulate="fp16").run(frozenset(), feed)["y"]).any()
    assert EmulateBackend(graph, accumulate="fp16").run(plan_of(fp32=["mm"]), feed)["y"].tolist() == [[[81920.0]]] * 2


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_partials_made_one_at_a_time_give_the_values_of_the_whole_tree(monkeypatch, op):
    """A long sum's partials are made one at a time when the output is large (less memory), all at once when it
    is small: the same values bit for bit, with sums that overflow in places. MatMul: 13 partials (an odd one out
    at every level of the tree), made by 13 MatMuls or one. Conv over 13 channels, 3x3: 9 partials (13 channels of
    one tap each), rounded one by one and at each of the 8 Adds of the tree, or rounded at once and at each of
    the tree's 4 levels."""
    from fp16bisect.backends.emulate import backend as emulate_backend
    from fp16bisect.backends.emulate.seen import Seen

    rng = np.random.default_rng(7)
    if op == "Conv":
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="sum", pads=[1, 1, 1, 1])]
        inputs, weights = [("x", F, [1, 13, "h", "w"])], {"w": rng.uniform(-1, 1, (4, 13, 3, 3)).astype(np.float32)}
        feed = {"x": rng.uniform(-1, 1, (1, 13, 9, 9)).astype(np.float32) * np.where(rng.random(13) < 0.3, 2e4, 1)[
            None, :, None, None].astype(np.float32)}
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="sum")]
        inputs, weights = [("x", F, [3, "m", 203])], {"w": rng.uniform(-1, 1, (203, 5)).astype(np.float32)}
        feed = {"x": rng.uniform(-1, 1, (3, 7, 203)).astype(np.float32) * np.where(rng.random(203) < 0.2, 3e4, 1)
                .astype(np.float32)}
    graph = Graph(make_model(nodes, inputs, [("y", F, None)], weights))
    results, made = [], []
    for elements in (1 << 30, 1):  # one partial at a time; all at once
        monkeypatch.setattr(emulate_backend, "seen", lambda graph, inputs, n=elements: Seen(sizes={"y": n}))
        backend = EmulateBackend(graph, accumulate="fp16")
        results.append(backend.run(frozenset(), feed)["y"])
        branch = next(n for n in backend.emulation.model.graph.node if n.op_type == "If" and n.name.endswith("/sum"))
        fp16_sums = next(a.g for a in branch.attribute if a.name == "else_branch")
        rounds = sum(n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT16 for n in fp16_sums.node)
        made.append(sum(n.op_type == op for n in fp16_sums.node) if op == "MatMul" else rounds)
    assert made == ([13, 1] if op == "MatMul" else [17, 5])
    assert not np.isfinite(results[0]).all() and np.isfinite(results[0]).any()
    assert results[0].tobytes() == results[1].tobytes()


def test_every_summing_node_of_pp_ocrv4_rec_is_modelled():
    """PP-OCRv4's recognizer (a Paddle export: shape inference knows the rank of 27 of its 67 summing nodes' inputs
    not): after the first run, nothing is left with FP32 sums, nothing is said, and the all-FP16 plan runs."""
    from real_models import PP_OCRV4_REC, real_model

    graph = Graph.load(real_model(PP_OCRV4_REC))
    said: list[str] = []
    fp16 = EmulateBackend(graph, accumulate="fp16", notify=said.append)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)
    out = fp16.run(frozenset(), {graph.model.graph.input[0].name: x})
    assert fp16.emulation.unmodelled == [] and said == []
    assert len(fp16.emulation.accumulators) > 50 and all(np.isfinite(v).all() for v in out.values())
