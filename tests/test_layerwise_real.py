"""``compare`` on a real model (PP-OCRv4 rec from rapidocr-onnxruntime's wheel) with two planted FP16 overflows.

Was: on this model the layer-wise rule (absolute thresholds) named ``p2o.Mul.26``, node 40, far upstream of both
planted sites, as the first failing node, in all-FP16 and with overrides that pass: FP16 rounding of values in
the hundreds gives absolute errors above 1. The rule is now relative to each tensor's own scale.

The faults are planted with powers of two, exact in FP32 and FP16, so the FP32 model computes what the original
does (apart from the planted magnitudes):
- BatchNormalization ``p2o.BatchNormalization.0``: its scale and shift times 2^k, so its output passes 65504;
  a new ``planted_bn_descale`` (times 2^-k) after it restores the value its consumer reads.
- the first decomposed LayerNorm's ``Pow`` (x - mean)^2, ``p2o.Pow.0``: its input times 2^j (``planted_ln_scale``,
  whose output stays well inside FP16) so that the square passes 65504; ``planted_ln_descale`` (times 2^-2j)
  after it.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from conftest import run
from onnx import helper, numpy_helper
from real_models import PP_OCRV4_REC, real_model

from fp16bisect.cli.main import main
from fp16bisect.diagnose.layerwise import LayerwiseRunner, Thresholds
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import session
from fp16bisect.model.samples import Sample

BN, POW = "p2o.BatchNormalization.0", "p2o.Pow.0"
BN_SITE = {BN, "planted_bn_descale"}  # the planted node and its direct consumer
POW_SITE = {POW, "planted_ln_descale"}
SHAPE = (1, 3, 48, 96)


def _fp32_max(model: onnx.ModelProto, tensors: list[str], feed: dict) -> list[float]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.extend(onnx.ValueInfoProto(name=t) for t in tensors)
    return [float(np.abs(v).max()) for v in session(m).run(tensors, feed)]


def plant(source, target, feed) -> None:
    model = onnx.load(source)
    nodes = {n.name: n for n in model.graph.node}
    bn, pow_ = nodes[BN], nodes[POW]
    bn_max, d_max = _fp32_max(model, [bn.output[0], pow_.input[0]], feed)
    k = math.ceil(math.log2(4 * 65504 / bn_max))  # BN output 4x past FP16's range
    j = round(math.log2(2048 / d_max))  # (x - mean) up to 2048: fine in FP16, its square (4e6) is not
    constants = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    for name in bn.input[1:3]:  # scale and shift
        value = constants[name].attribute[0]
        value.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(value.t) * np.float32(2.0**k), value.t.name))
    model.graph.initializer.extend([
        numpy_helper.from_array(np.float32(2.0**-k), "planted_bn_down"),
        numpy_helper.from_array(np.float32(2.0**j), "planted_ln_up"),
        numpy_helper.from_array(np.float32(2.0 ** (-2 * j)), "planted_ln_down"),
    ])
    bn_out, pow_in, pow_out = bn.output[0], pow_.input[0], pow_.output[0]
    bn.output[0] = "planted_bn_big"
    pow_.input[0], pow_.output[0] = "planted_ln_scaled", "planted_ln_square"
    new = []
    for n in model.graph.node:
        if n.name == POW:
            new.append(helper.make_node("Mul", [pow_in, "planted_ln_up"], ["planted_ln_scaled"], "planted_ln_scale"))
        new.append(n)
        if n.name == BN:
            new.append(helper.make_node("Mul", ["planted_bn_big", "planted_bn_down"], [bn_out], "planted_bn_descale"))
        if n.name == POW:
            new.append(helper.make_node("Mul", ["planted_ln_square", "planted_ln_down"], [pow_out],
                                        "planted_ln_descale"))
    del model.graph.node[:]
    model.graph.node.extend(new)
    onnx.save(model, target)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rec")
    x = np.random.default_rng(0).uniform(-1, 1, SHAPE).astype(np.float32)
    np.savez(folder / "x.npz", x=x)
    model = folder / "rec_planted.onnx"
    plant(real_model(PP_OCRV4_REC), model, {"x": x})
    return model, folder / "x.npz", x


def test_planting_leaves_the_fp32_result_unchanged(planted):
    model, _, x = planted
    original = session(onnx.load(real_model(PP_OCRV4_REC))).run(None, {"x": x})[0]
    ours = session(onnx.load(model)).run(None, {"x": x})[0]
    # ONNX Runtime fuses differently around the new Mul nodes (BatchNormalization into the Conv before it):
    # FP32 summation-order differences only
    np.testing.assert_allclose(ours, original, rtol=1e-5, atol=1e-7)


def test_first_failing_node_is_the_planted_site_and_passing_overrides_fail_no_node(planted, tmp_path, capsys):
    model, inputs, x = planted
    graph = Graph.load(model)
    runner = LayerwiseRunner(graph, [Sample(str(inputs), {"x": x})])
    fp16 = runner.run(frozenset())
    assert fp16.first_failing.node in BN_SITE, [(n.node, n.error) for n in fp16.failing[:5]]
    assert fp16.first_failing.metrics.nonfinite  # the overflow itself, not rounding
    pinned = runner.run(BN_SITE)  # the first fault gone: the second one is next
    assert pinned.first_failing.node in POW_SITE, [(n.node, n.error) for n in pinned.failing[:5]]
    before = {n.node for n in fp16.nodes if graph.by_id[n.node].index < graph.by_id[BN].index}
    assert not before & {n.node for n in fp16.failing}
    # every node upstream of the first fault stays far inside the bound: FP16 rounding of its own values
    assert max(n.error for n in fp16.nodes if n.node in before) < Thresholds().max_error / 4

    overrides = tmp_path / "overrides.json"
    code, out, err = run(capsys, "search", model, "--inputs", inputs, "-o", overrides, "-q")
    assert code == 0, err
    kept = {n["name"] for n in json.loads(overrides.read_text())["fp32_nodes"]}
    assert kept & BN_SITE and kept & POW_SITE, kept
    csv = tmp_path / "nodes.csv"
    code, out, err = run(capsys, "compare", model, "--inputs", inputs, "--overrides", overrides, "--csv", csv, "-q")
    assert code == 0, err
    assert "no node fails the thresholds" in out, out
    rows = csv.read_text().splitlines()
    assert rows[0].split(",")[:7] == ["node", "op_type", "fp32", "tensor", "max_abs", "fp32_max_abs", "error"]
    assert all(r.endswith(",True") for r in rows[1:])
    assert main(["compare", str(model), "--inputs", str(inputs), "--max-error", "-1"]) == 2
