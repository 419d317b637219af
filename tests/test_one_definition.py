"""One definition of a plan: the emulator computes what the plan's written mixed-precision file computes.

For random plans on several models, the emulate backend's outputs are compared with a faithful run of the
file ``apply`` writes for the plan (``storage_emulation``: every FP16 tensor of the file rounded, arithmetic
in FP32). Models: the sample models, Hugging Face style transformer blocks whose mask constant is
``torch.finfo(float32).min`` (FP16 cannot hold it: the writer saturates it, and the emulator must too),
BatchNormalizations at opsets 12 (statistics in FP16, or folded), 14 and 15 (statistics in FP32).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import SAMPLES
from hf_style import bert_block, gpt_block
from test_bn_fold import conv_bn_relu

from fp16bisect.artifacts.mixed import convert
from fp16bisect.artifacts.verify import storage_emulation
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import session


def _bn(**kw):
    return lambda: (conv_bn_relu(**kw), {"x": np.random.default_rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32)})


def _sample(name):
    def make():
        data = np.load(SAMPLES / f"{name}.npz")
        return onnx.load(SAMPLES / f"{name}.onnx"), {k: data[k] for k in data.files}
    return make


MODELS = {
    "bert_block": bert_block,
    "gpt_block": gpt_block,
    "bert_block_opset18": lambda: bert_block(opset=18),
    "bn_opset12_folded": _bn(var=1e8, gamma=1e4, opset=12),
    "bn_opset12_fits": _bn(var=1.0, gamma=1.0, opset=12),
    "bn_opset12_tiny_variance": _bn(var=1e-9, gamma=1.0, opset=12),
    "bn_opset14": _bn(var=1e8, gamma=1e4, opset=14),
    "bn_opset15": _bn(var=1e8, gamma=1e4, opset=15),
    **{name: _sample(name) for name in ("transformer_block", "attention_unscaled", "log_underflow", "cnn_batchnorm",
                                        "accumulation", "two_branches", "fp16_safe")},
}


def plans(ids, count=6, seed=0):
    rng = np.random.default_rng(seed)
    yield frozenset()
    yield frozenset(ids)
    for _ in range(count):
        yield frozenset(i for i in ids if rng.random() < rng.random())


def written(graph, plan, inputs):
    """A faithful run of the plan's file: FP16 storage as written, FP32 arithmetic."""
    model = convert(graph, plan).model
    names = [o.name for o in graph.outputs]
    return dict(zip(names, session(storage_emulation(model), "the written file", basic=True).run(names, inputs)))


@pytest.mark.parametrize("name", list(MODELS))
def test_the_emulator_computes_what_the_written_file_computes(name):
    model, inputs = MODELS[name]()
    graph = Graph(model)
    backend = EmulateBackend(graph)
    ids = [n.id for n in graph.candidates]
    for plan in plans(ids):
        emulated = backend.run(plan, inputs)
        for output, want in written(graph, plan, inputs).items():
            got = emulated[output]
            assert np.array_equal(np.isnan(got), np.isnan(want)), (name, sorted(plan), output)
            finite = np.isfinite(want)
            assert np.array_equal(got[~finite], want[~finite], equal_nan=True), (name, sorted(plan), output)
            # FP32 summation order (ONNX Runtime's optimisation levels differ): within a few FP32 ulps
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}, plan {sorted(plan)}, output {output}")


def test_the_mask_constant_is_saturated_in_the_file_and_in_the_emulator():
    model, inputs = gpt_block(planted=False)
    graph = Graph(model)
    mixed = convert(graph, [])
    stored = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in mixed.model.graph.node
              if n.op_type == "Constant"}
    assert stored["/m/Constant_11_output_0"].dtype == np.float16
    assert float(stored["/m/Constant_11_output_0"]) == -65504.0
    assert {c.constant: (c.saturated, c.lifted, c.readers) for c in mixed.conversions} == {
        "/m/Constant_11_output_0": (1, 0, ("/m/Where_1",)),
        "eps": (0, 1, ("ln_eps",)),  # BERT's LayerNorm epsilon 1e-12 is stored as 2^-24
    }
    y = EmulateBackend(graph).run(frozenset(), inputs)["y"]
    assert np.isfinite(y).all()  # the left-padded row's fully masked query: uniform, not NaN
