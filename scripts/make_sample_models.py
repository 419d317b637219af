#!/usr/bin/env python
"""Build the sample models of ``sample_models/`` (and check them with ``--check``).

    python scripts/make_sample_models.py               # writes <repo>/sample_models/
    python scripts/make_sample_models.py --out DIR     # writes DIR/
    python scripts/make_sample_models.py --check       # writes, then verifies every model

Each model ``<name>`` gets ``<name>.onnx`` (opset 17, IR version 8, float32)
and ``<name>.npz`` (one float32 array per model input, keyed by input name).
Only ``onnx.helper`` and NumPy build them; every seed is fixed, so the files
are the same on every run. ``sample_models/README.md`` explains each model:
why it fails in FP16 and which nodes must stay in FP32.

``KNOWN`` (below) is what the tests import: model name -> the node ids the
search must return and the tolerance to use. Importing this file only defines
things; it builds and checks nothing (tests load it with importlib).

``--check`` needs the ``fp16bisect`` package (the repository root is put on
``sys.path``). For every model it verifies, with the model's tolerance and the
emulate backend: the all-FP32 plan passes; the all-FP16 plan fails (passes for
``fp16_safe``); the search returns exactly ``KNOWN[name]["culprits"]``; and the
set is 1-minimal by direct evaluation (removing any member fails). For
``accumulation`` it also evaluates every subset of the candidates to show that
all 1-minimal sets have the same size. It prints one line per model and exits
1 on any mismatch.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

# Default tolerance of fp16bisect (atol 1e-2, rtol 1e-2) unless stated.
KNOWN = {
    "transformer_block": {"culprits": ["ln1_square", "ln1_var"], "atol": 1e-2, "rtol": 1e-2},
    # all nodes of this model are unnamed: ids are the first output tensor names
    "cnn_batchnorm": {"culprits": ["conv1_out", "bn1_out"], "atol": 1e-2, "rtol": 1e-2},
    "attention_unscaled": {"culprits": ["qk_matmul", "softmax"], "atol": 1e-2, "rtol": 1e-2},
    "log_underflow": {"culprits": ["softmax", "log"], "atol": 1e-2, "rtol": 1e-2},
    # "reduce" and "div" name two nodes each: those ids fall back to output names
    "two_branches": {
        "culprits": ["a_square", "a_mean_sq", "b_exp", "b_sum", "b_prob"],
        "atol": 1e-2,
        "rtol": 1e-2,
    },
    "fp16_safe": {"culprits": [], "atol": 1e-2, "rtol": 1e-2},
    # overflows only on its 4 loud frames (of 48, in loudness/): loudness.npz is one of them
    "loudness": {"culprits": ["power", "energy"], "atol": 1e-2, "rtol": 1e-2, "loud": [13, 22, 35, 44],
                 "frames": 48, "headroom": 4.0},
    # Any 7 of the 10 branches form a 1-minimal set (all 120 have size 7);
    # "culprits" is the one the search returns with its topological tie order.
    "accumulation": {
        "culprits": [f"branch{i}" for i in range(7)],
        "atol": 0.4,
        "rtol": 0.0,
        "branches": [f"branch{i}" for i in range(10)],
        "fp16_budget": 3,  # at most this many branches may run in FP16
        "minimal_size": 7,
    },
}

OPSET = 17
IR_VERSION = 8
MAX_BYTES = 200_000


# --------------------------------------------------------------------------- building


class _Builder:
    """Collects nodes and float32 initializers; ``build`` returns the model."""

    def __init__(self, name: str):
        self.name = name
        self.nodes = []
        self.initializers = []

    def const(self, name: str, value) -> str:
        from onnx import numpy_helper

        array = np.asarray(value)
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def shape(self, name: str, dims) -> str:
        return self.const(name, np.asarray(dims, dtype=np.int64))

    def op(self, op_type: str, inputs, output: str, name: str | None = None, **attrs) -> str:
        """One node with one output; ``name=None`` names the node after its output, ``""`` leaves it unnamed."""
        from onnx import helper

        node_name = output if name is None else name
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=node_name, **attrs))
        return output

    def build(self, inputs: dict, outputs: dict):
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n, shape in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n, shape in outputs.items()],
            self.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fp16bisect-samples"
        )
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def _layernorm(b: _Builder, x: str, prefix: str, dim: int, eps: float = 1e-5, out: str | None = None) -> str:
    """Decomposed LayerNorm over the last axis, nodes named ``<prefix>_<step>``."""
    p = prefix
    mean = b.op("ReduceMean", [x], f"{p}_mean_out", name=f"{p}_mean", axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean], f"{p}_centered", name=f"{p}_sub")
    sq = b.op("Mul", [d, d], f"{p}_sq", name=f"{p}_square")
    var = b.op("ReduceMean", [sq], f"{p}_var_out", name=f"{p}_var", axes=[-1], keepdims=1)
    ve = b.op("Add", [var, b.const(f"{p}.eps", np.float32(eps))], f"{p}_var_eps", name=f"{p}_add_eps")
    sd = b.op("Sqrt", [ve], f"{p}_std", name=f"{p}_sqrt")
    y = b.op("Div", [d, sd], f"{p}_normed", name=f"{p}_div")
    rng = np.random.RandomState(sum(map(ord, p)))
    g = b.op("Mul", [y, b.const(f"{p}.gamma", 1.0 + 0.1 * rng.randn(dim))], f"{p}_scaled", name=f"{p}_gamma")
    return b.op("Add", [g, b.const(f"{p}.beta", 0.1 * rng.randn(dim))], out or f"{p}_out", name=f"{p}_beta")


def transformer_block():
    """Post-LN encoder block whose residual stream carries outlier activations of 300-420."""
    S, D, H, F = 16, 64, 4, 96
    hd = D // H
    rng = np.random.RandomState(1)
    b = _Builder("transformer_block")

    def linear(x, name, n_in, n_out, out, rows_scale=None):
        w = rng.randn(n_in, n_out) / np.sqrt(n_in)
        if rows_scale is not None:
            w[rows_scale] *= 0.01  # the outlier channel barely enters attention
        mm = b.op("MatMul", [x, b.const(f"{name}.weight", w)], f"{out}_mm", name=f"{name}_matmul")
        return b.op("Add", [mm, b.const(f"{name}.bias", 0.02 * rng.randn(n_out))], out, name=f"{name}_bias")

    outlier = 5
    q = linear("x", "q_proj", D, D, "q", outlier)
    k = linear("x", "k_proj", D, D, "k", outlier)
    v = linear("x", "v_proj", D, D, "v", outlier)
    heads = b.shape("heads_shape", [1, S, H, hd])
    qh = b.op("Transpose", [b.op("Reshape", [q, heads], "q_split")], "q_heads", perm=[0, 2, 1, 3])
    kt = b.op("Transpose", [b.op("Reshape", [k, heads], "k_split")], "k_heads_t", perm=[0, 2, 3, 1])
    vh = b.op("Transpose", [b.op("Reshape", [v, heads], "v_split")], "v_heads", perm=[0, 2, 1, 3])
    logits = b.op("MatMul", [qh, kt], "attn_logits", name="qk_matmul")
    scaled = b.op("Mul", [logits, b.const("attn_scale", np.float32(1 / np.sqrt(hd)))], "attn_scaled", name="attn_scale")
    probs = b.op("Softmax", [scaled], "attn_probs", name="attn_softmax", axis=-1)
    ctx = b.op("MatMul", [probs, vh], "attn_ctx", name="attn_v_matmul")
    merged = b.op(
        "Reshape",
        [b.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3]), b.shape("merge_shape", [1, S, D])],
        "ctx_merged",
    )
    attn = linear(merged, "o_proj", D, D, "attn_out")
    h = b.op("Add", ["x", attn], "residual1", name="residual1_add")
    h = _layernorm(b, h, "ln1", D)
    up = linear(h, "fc1", D, F, "fc1_out")
    # GELU, erf form: 0.5 * u * (1 + erf(u / sqrt(2)))
    e = b.op("Erf", [b.op("Div", [up, b.const("sqrt2", np.float32(np.sqrt(2)))], "gelu_div_out", name="gelu_div")],
             "gelu_erf_out", name="gelu_erf")
    e1 = b.op("Add", [e, b.const("one", np.float32(1))], "gelu_add_out", name="gelu_add_one")
    gm = b.op("Mul", [up, e1], "gelu_mul_out", name="gelu_mul")
    act = b.op("Mul", [gm, b.const("half", np.float32(0.5))], "gelu_out", name="gelu_half")
    down = linear(act, "fc2", F, D, "fc2_out")
    h2 = b.op("Add", [h, down], "residual2", name="residual2_add")
    _layernorm(b, h2, "ln2", D, out="y")

    x = np.random.RandomState(2).randn(1, S, D).astype(np.float32)
    for token, value in [(0, 412.0), (3, -356.0), (9, 301.5), (14, 388.25)]:
        x[0, token, outlier] = value
    return b.build({"x": [1, S, D]}, {"y": [1, S, D]}), {"x": x}


def cnn_batchnorm():
    """Raw 0-255 pixels into a large-weight conv; BatchNorm scales it back. All nodes unnamed."""
    rng = np.random.RandomState(3)
    b = _Builder("cnn_batchnorm")
    img = np.random.RandomState(4).randint(0, 256, size=(1, 3, 16, 16)).astype(np.float32)

    w1 = rng.randn(8, 3, 3, 3) * 60.0
    w1 -= w1.mean(axis=(1, 2, 3), keepdims=True)  # zero-sum (edge-like) filters: large, centred outputs
    b1 = rng.randn(8) * 100.0
    # BatchNorm statistics of the conv output on this image (what training would have tracked)
    conv_ref = _conv2d(img, w1, b1)
    mean1 = conv_ref.mean(axis=(0, 2, 3))
    var1 = np.full(8, 60000.0)  # representable in FP16; gamma does the rest of the scaling
    gamma1 = np.sqrt(60000.0) / conv_ref.std(axis=(0, 2, 3)) * (1.0 + 0.1 * rng.randn(8))
    c1 = b.op("Conv", ["image", b.const("conv1.weight", w1), b.const("conv1.bias", b1)], "conv1_out", name="",
              pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    n1 = b.op("BatchNormalization", [c1, b.const("bn1.scale", gamma1), b.const("bn1.bias", 0.1 * rng.randn(8)),
                                     b.const("bn1.mean", mean1), b.const("bn1.var", var1)], "bn1_out", name="",
              epsilon=1e-5)
    r1 = b.op("Relu", [n1], "relu1_out", name="")
    p1 = b.op("MaxPool", [r1], "pool1_out", name="", kernel_shape=[2, 2], strides=[2, 2])
    w2 = rng.randn(16, 8, 3, 3) / np.sqrt(72)
    c2 = b.op("Conv", [p1, b.const("conv2.weight", w2), b.const("conv2.bias", 0.05 * rng.randn(16))], "conv2_out",
              name="", pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    n2 = b.op("BatchNormalization", [c2, b.const("bn2.scale", 1 + 0.1 * rng.randn(16)),
                                     b.const("bn2.bias", 0.1 * rng.randn(16)), b.const("bn2.mean", 0.05 * rng.randn(16)),
                                     b.const("bn2.var", 0.5 + rng.rand(16))], "bn2_out", name="", epsilon=1e-5)
    r2 = b.op("Relu", [n2], "relu2_out", name="")
    gap = b.op("GlobalAveragePool", [r2], "gap_out", name="")
    flat = b.op("Flatten", [gap], "flat_out", name="", axis=1)
    b.op("Gemm", [flat, b.const("fc.weight", rng.randn(10, 16) / 4.0), b.const("fc.bias", 0.1 * rng.randn(10))],
         "logits", name="", transB=1)
    return b.build({"image": [1, 3, 16, 16]}, {"logits": [1, 10]}), {"image": img}


def _conv2d(x, w, bias):
    """3x3, stride 1, pad 1 convolution in float64 (to derive BatchNorm statistics)."""
    n, c, hgt, wid = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], hgt, wid))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + hgt, j : j + wid], w[:, :, i, j])
    return out + bias[None, :, None, None]


def attention_unscaled():
    """Two-head attention without the 1/sqrt(d) scale; a constant 300 'sink' direction in Q and K."""
    S, D, H = 16, 32, 2
    hd = D // H
    rng = np.random.RandomState(5)
    b = _Builder("attention_unscaled")

    def proj(x, name, out, sink=None, scale=1.0):
        w = rng.randn(D, D) / np.sqrt(D) * scale
        bias = 0.02 * rng.randn(D)
        if sink is not None:  # last dim of each head: zero weights, bias 300 (exact in FP16)
            for hh in range(H):
                w[:, hh * hd + hd - 1] = 0.0
                bias[hh * hd + hd - 1] = sink
        mm = b.op("MatMul", [x, b.const(f"{name}.weight", w)], f"{out}_mm", name=f"{name}_matmul")
        return b.op("Add", [mm, b.const(f"{name}.bias", bias)], out, name=f"{name}_bias")

    q = proj("x", "q_proj", "q", sink=300.0, scale=0.8)
    k = proj("x", "k_proj", "k", sink=300.0, scale=0.8)
    v = proj("x", "v_proj", "v", scale=0.7)
    heads = b.shape("heads_shape", [1, S, H, hd])
    qh = b.op("Transpose", [b.op("Reshape", [q, heads], "q_split")], "q_heads", perm=[0, 2, 1, 3])
    kt = b.op("Transpose", [b.op("Reshape", [k, heads], "k_split")], "k_heads_t", perm=[0, 2, 3, 1])
    vh = b.op("Transpose", [b.op("Reshape", [v, heads], "v_split")], "v_heads", perm=[0, 2, 1, 3])
    logits = b.op("MatMul", [qh, kt], "logits", name="qk_matmul")
    flat = b.op("Reshape", [logits, b.shape("rows_shape", [H * S, S])], "logits_rows", name="logits_flatten")
    probs = b.op("Softmax", [flat], "probs_rows", name="softmax", axis=-1)
    probs = b.op("Reshape", [probs, b.shape("probs_shape", [1, H, S, S])], "probs", name="probs_unflatten")
    ctx = b.op("MatMul", [probs, vh], "ctx", name="av_matmul")
    merged = b.op(
        "Reshape",
        [b.op("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3]), b.shape("merge_shape", [1, S, D])],
        "ctx_merged",
    )
    proj(merged, "o_proj", "y")
    x = np.random.RandomState(6).randn(1, S, D).astype(np.float32)
    return b.build({"x": [1, S, D]}, {"y": [1, S, D]}), {"x": x}


def log_underflow():
    """Classifier head with a sharpened log-softmax (Softmax then Log) over 16 classes."""
    N, D, C = 4, 32, 16
    rng = np.random.RandomState(7)
    b = _Builder("log_underflow")
    h = b.op("MatMul", ["x", b.const("fc1.weight", rng.randn(D, D) / np.sqrt(D))], "fc1_mm", name="fc1_matmul")
    h = b.op("Add", [h, b.const("fc1.bias", 0.1 * rng.randn(D))], "fc1_out", name="fc1_bias")
    h = b.op("Tanh", [h], "tanh_out", name="tanh")
    z = b.op("MatMul", [h, b.const("fc2.weight", rng.randn(D, C) * 0.5)], "fc2_mm", name="fc2_matmul")
    z = b.op("Add", [z, b.const("fc2.bias", 0.1 * rng.randn(C))], "fc2_out", name="fc2_bias")
    z = b.op("Mul", [z, b.const("inv_temperature", np.float32(4.0))], "sharp_logits", name="sharpen")
    p = b.op("Softmax", [z], "probs", name="softmax", axis=-1)
    lp = b.op("Log", [p], "log_probs", name="log")
    b.op("Neg", [lp], "nll", name="nll")
    x = np.random.RandomState(8).randn(N, D).astype(np.float32)
    return b.build({"x": [N, D]}, {"nll": [N, C]}), {"x": x}


def two_branches():
    """RMSNorm branch (x^2 overflows) + naive-softmax branch (exp overflows), added at the end."""
    N, D, C = 8, 32, 16
    rng = np.random.RandomState(9)
    b = _Builder("two_branches")
    # branch A: RMSNorm of the features, then a projection
    sq = b.op("Mul", ["features", "features"], "a_sq", name="a_square")
    ms = b.op("ReduceMean", [sq], "a_mean_sq", name="reduce", axes=[-1], keepdims=1)
    ms = b.op("Add", [ms, b.const("a.eps", np.float32(1e-6))], "a_mean_sq_eps", name="a_add_eps")
    rms = b.op("Sqrt", [ms], "a_rms", name="a_sqrt")
    nrm = b.op("Div", ["features", rms], "a_norm", name="div")
    nrm = b.op("Mul", [nrm, b.const("a.gamma", 1 + 0.1 * rng.randn(D))], "a_scaled", name="a_gamma")
    a = b.op("MatMul", [nrm, b.const("a.proj", rng.randn(D, C) / np.sqrt(D))], "a_out", name="a_proj")
    # branch B: softmax written without the max subtraction
    z = b.op("Mul", ["scores", b.const("b.gain", np.float32(2.0))], "b_z", name="b_gain")
    z = b.op("Add", [z, b.const("b.bias", 0.1 * rng.randn(C))], "b_zb", name="b_bias")
    e = b.op("Exp", [z], "b_e", name="b_exp")
    s = b.op("ReduceSum", [e, b.shape("b.axes", [-1])], "b_sum", name="reduce", keepdims=1)
    p = b.op("Div", [e, s], "b_prob", name="div")
    b.op("Add", [a, p], "y", name="merge")

    data = np.random.RandomState(10)
    features = data.randn(N, D).astype(np.float32)
    features[1, 3], features[5, 3], features[6, 20] = 402.0, -377.5, 318.0
    scores = (1.5 * data.randn(N, C)).astype(np.float32)
    scores[2, 7], scores[4, 0], scores[7, 11] = 5.9, 6.1, 5.7  # 2 * 6.1 = 12.2, exp(12.2) ~ 2e5
    return b.build({"features": [N, D], "scores": [N, C]}, {"y": [N, C]}), {"features": features, "scores": scores}


def fp16_safe():
    """Residual MLP with LayerNormalization and a sigmoid head on unit-scale inputs."""
    N, D, F, C = 4, 32, 64, 8
    rng = np.random.RandomState(11)
    b = _Builder("fp16_safe")
    h = b.op("MatMul", ["x", b.const("fc1.weight", rng.randn(D, F) / np.sqrt(D))], "fc1_mm", name="fc1_matmul")
    h = b.op("Add", [h, b.const("fc1.bias", 0.1 * rng.randn(F))], "fc1_out", name="fc1_bias")
    h = b.op("Relu", [h], "relu_out", name="relu")
    h = b.op("MatMul", [h, b.const("fc2.weight", rng.randn(F, D) / np.sqrt(F))], "fc2_mm", name="fc2_matmul")
    h = b.op("Add", [h, b.const("fc2.bias", 0.1 * rng.randn(D))], "fc2_out", name="fc2_bias")
    h = b.op("Add", ["x", h], "residual_out", name="residual")
    h = b.op("LayerNormalization", [h, b.const("ln.scale", 1 + 0.1 * rng.randn(D)), b.const("ln.bias", 0.1 * rng.randn(D))],
             "ln_out", name="layernorm", axis=-1, epsilon=1e-5)
    h = b.op("MatMul", [h, b.const("head.weight", rng.randn(D, C) / np.sqrt(D))], "head_mm", name="head_matmul")
    h = b.op("Add", [h, b.const("head.bias", 0.1 * rng.randn(C))], "head_out", name="head_bias")
    b.op("Sigmoid", [h], "y", name="sigmoid")
    x = np.random.RandomState(12).randn(N, D).astype(np.float32)
    return b.build({"x": [N, D]}, {"y": [N, C]}), {"x": x}


def accumulation():
    """Ten identical branches (x - 1000) summed with a bias of 128; each FP16 branch loses 0.125."""
    K = 10
    b = _Builder("accumulation")
    offset = b.const("offset", np.float32(1000.0))
    terms = [b.op("Sub", ["x", offset], f"branch{i}_out", name=f"branch{i}") for i in range(K)]
    b.op("Sum", [*terms, b.const("base", np.float32(128.0))], "y", name="sum")
    # 1000.125 + 0.5 n: exact in FP32; FP16 (spacing 0.5 in [512, 1024)) rounds it down by 0.125
    x = (1000.125 + 0.5 * np.arange(16)).astype(np.float32)
    return b.build({"x": [16]}, {"y": [16]}), {"x": x}


LOUDNESS_FRAME, LOUDNESS_FEATURES = 64, 16


def loudness_frame(index: int, frame: int = LOUDNESS_FRAME, loud=None) -> np.ndarray:
    """Frame ``index`` of the 48 in ``loudness/``: a sine of amplitude 33-35.5 (quiet: the gained power peaks at
    27-31% of 65504) or, for the loud frames of ``KNOWN["loudness"]["loud"]``, of 68-80 (the power overflows)."""
    rng = np.random.RandomState(100 + index)
    loud = index in KNOWN["loudness"]["loud"] if loud is None else loud
    amplitude = rng.uniform(68.0, 80.0) if loud else rng.uniform(33.0, 35.5)
    t = np.arange(frame)
    wave = np.sin(2 * np.pi * (t * rng.uniform(2.0, 6.0) / frame) + np.pi / 2)  # its peak at t = 0
    return (amplitude * wave + 0.05 * rng.randn(frame)).reshape(1, frame).astype(np.float32)


def loudness(frame: int = LOUDNESS_FRAME):
    """An audio front end: gain, RMS normalisation, a small projection; its power overflows on loud frames.
    ``frame``: samples per frame (64 in sample_models/; scripts/bench_coverage.py makes larger ones)."""
    D, C = frame, LOUDNESS_FEATURES
    rng = np.random.RandomState(11)
    b = _Builder("loudness")
    g = b.op("Mul", ["x", b.const("gain.value", np.float32(4.0))], "gained", name="gain")
    p = b.op("Mul", [g, g], "power_out", name="power")
    e = b.op("ReduceMean", [p], "energy_out", name="energy", axes=[-1], keepdims=1)
    e = b.op("Add", [e, b.const("eps", np.float32(1e-3))], "energy_eps", name="add_eps")
    r = b.op("Sqrt", [e], "rms_out", name="rms")
    y = b.op("Div", [g, r], "normalised", name="norm")
    h = b.op("MatMul", [y, b.const("mix.weight", rng.randn(D, C) / np.sqrt(D))], "mix_out", name="mix")
    h = b.op("Add", [h, b.const("mix.bias", 0.1 * rng.randn(C))], "mix_biased", name="mix_bias")
    b.op("Tanh", [h], "features", name="act")
    return b.build({"x": [1, D]}, {"features": [1, C]}), {"x": loudness_frame(KNOWN["loudness"]["loud"][0])}


def write_frames(out: Path) -> list[Path]:
    """``loudness/frame_NN.npz``: the 48 frames of the loudness model (4 loud)."""
    folder = out / "loudness"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(KNOWN["loudness"]["frames"]):
        path = folder / f"frame_{i:02d}.npz"
        _save_npz(path, {"x": loudness_frame(i)})
        paths.append(path)
    return paths


BUILDERS = {
    "transformer_block": transformer_block,
    "cnn_batchnorm": cnn_batchnorm,
    "attention_unscaled": attention_unscaled,
    "log_underflow": log_underflow,
    "two_branches": two_branches,
    "fp16_safe": fp16_safe,
    "accumulation": accumulation,
    "loudness": loudness,
}


def write_all(out: Path, names=None) -> list[Path]:
    import onnx

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or BUILDERS:
        model, inputs = BUILDERS[name]()
        onnx_path, npz_path = out / f"{name}.onnx", out / f"{name}.npz"
        onnx.save_model(model, str(onnx_path))
        _save_npz(npz_path, inputs)
        for path in (onnx_path, npz_path):
            size = path.stat().st_size
            if size >= MAX_BYTES:
                raise SystemExit(f"{path} is {size} bytes, over the {MAX_BYTES} byte budget")
        written += [onnx_path, npz_path]
        if name == "loudness":
            written += write_frames(out)
    return written


def _save_npz(path: Path, arrays: dict) -> None:
    """Like ``numpy.savez`` (same format), with fixed zip timestamps so reruns give identical bytes."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for key, value in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(value, dtype=np.float32), allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())


# --------------------------------------------------------------------------- the large model (--large)

LARGE = {
    "name": "large_chains",
    "chains": 40,  # independent chains of elementwise layers on the same input, concatenated at the end
    "per_chain": 250,  # candidates per chain: 40 * 250 = 10,000
    "shape": (4, 256),  # every activation: 1024 floats
    "planted": (5, 17, 31),  # chains that end in a planted overflow site
}


def large_culprits() -> list[str]:
    """The nodes the search must keep in FP32 on the large model: each planted site's square and sqrt."""
    return [f"c{k}_site_{part}" for k in LARGE["planted"] for part in ("square", "sqrt")]


def large_model():
    """10,000 candidates: chains of tanh(w * h + b) layers (0 < w < 1: one fixed point per element, and FP16
    rounding errors shrink layer by layer; with w > 1 an element can sit between two fixed points and FP16
    flips it), three of them with a planted overflow site ``sqrt((2000 h)^2) / 2000`` as their last four
    nodes: the square passes 65504 where |h| > 0.128, so it and the Sqrt
    that reads it must stay in FP32 (like a LayerNorm's x^2 and its mean). The sites end their chains because
    an inf inside a chain would be washed out (tanh(inf) = 1, then each layer shrinks the error). Per-element
    vector weights, fixed seeds."""
    K, per, shape = LARGE["chains"], LARGE["per_chain"], LARGE["shape"]
    width = shape[-1]
    rng = np.random.RandomState(2026)
    b = _Builder(LARGE["name"])
    scale, unscale = b.const("site.scale", np.float32(2000.0)), b.const("site.unscale", np.float32(1 / 2000))
    ends = []
    for k in range(K):
        h, count, layer = "x", 0, 0
        site_at = per - 4 if k in LARGE["planted"] else -1
        while count < per:
            if count >= site_at >= 0:
                s = b.op("Mul", [h, scale], f"c{k}_site_scaled", name=f"c{k}_site_scale")
                q = b.op("Mul", [s, s], f"c{k}_site_sq", name=f"c{k}_site_square")
                r = b.op("Sqrt", [q], f"c{k}_site_abs", name=f"c{k}_site_sqrt")
                h = b.op("Mul", [r, unscale], f"c{k}_site_out", name=f"c{k}_site_unscale")
                count, site_at = count + 4, -1
                continue
            kind = ("mul", "add", "tanh")[layer % 3] if per - count > 3 or layer % 3 else "tanh"
            p = f"c{k}_l{layer}"
            if kind == "mul":
                h = b.op("Mul", [h, b.const(f"{p}.w", np.clip(0.7 + 0.1 * rng.randn(width), 0.3, 0.95))], f"{p}_mul_out", name=f"{p}_mul")
            elif kind == "add":
                h = b.op("Add", [h, b.const(f"{p}.b", 0.3 * rng.randn(width))], f"{p}_add_out", name=f"{p}_add")
            else:
                h = b.op("Tanh", [h], f"{p}_tanh_out", name=f"{p}_tanh")
            count, layer = count + 1, layer + 1
        ends.append(h)
    b.op("Concat", ends, "y", name="concat", axis=-1)
    x = (2.0 * np.random.RandomState(2027).randn(*shape)).astype(np.float32)
    return b.build({"x": list(shape)}, {"y": [shape[0], width * K]}), {"x": x}


def write_large(out: Path) -> tuple[Path, Path]:
    """The large model and its npz in ``out`` (not committed: the default is the git-ignored build/)."""
    import onnx

    out.mkdir(parents=True, exist_ok=True)
    model, inputs = large_model()
    onnx_path, npz_path = out / f"{LARGE['name']}.onnx", out / f"{LARGE['name']}.npz"
    onnx.save_model(model, str(onnx_path))
    _save_npz(npz_path, inputs)
    return onnx_path, npz_path


# --------------------------------------------------------------------------- checking


def _setup(out: Path, name: str):
    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.model.graph import Graph
    from fp16bisect.evaluation.oracle import Oracle
    from fp16bisect.model.samples import add_fp32_references, load_samples
    from fp16bisect.tolerance import Tolerance

    graph = Graph.load(out / f"{name}.onnx")
    samples = load_samples(graph, [str(out / f"{name}.npz")])
    add_fp32_references(graph, samples)
    tol = Tolerance(atol=KNOWN[name]["atol"], rtol=KNOWN[name]["rtol"])
    oracle = Oracle(EmulateBackend(graph), samples, tol, graph.float_output_names())
    return graph, samples, oracle


def _write_renamed(src: Path, dst: Path, name: str) -> None:
    """Copy a model, naming each node whose name is not unique after its first output."""
    import shutil
    from collections import Counter

    import onnx

    model = onnx.load_model(str(src / f"{name}.onnx"))
    counts = Counter(n.name for n in model.graph.node if n.name)
    for node in model.graph.node:
        if node.name and counts[node.name] > 1:
            node.name = node.output[0]
    onnx.save_model(model, str(dst / f"{name}.onnx"))
    shutil.copy(src / f"{name}.npz", dst / f"{name}.npz")


def _set_up_or_renamed(out: Path, name: str, problems: list[str]):
    """``_setup`` of the model; where ONNX Runtime refuses a graph with two nodes of the same name (TensorRT does
    not), that is a problem reported and the design is checked on a copy whose duplicate nodes are named after
    their first output (the node ids stay the same)."""
    from fp16bisect.errors import UsageError

    try:
        return _setup(out, name)
    except UsageError as exc:
        if "same node name" not in str(exc):
            raise
        problems.append(f"fp16bisect cannot run the file as is ({exc}); the rest was checked on a renamed copy")
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="fp16bisect-samples-"))
    _write_renamed(out, tmp, name)
    return _setup(tmp, name)


def check_model(out: Path, name: str) -> tuple[bool, str]:
    from fp16bisect.model.profile import profile
    from fp16bisect.algorithm.search import search

    problems: list[str] = []
    graph, samples, oracle = _set_up_or_renamed(out, name, problems)
    ids = [n.id for n in graph.candidates]
    known = KNOWN[name]
    if len(ids) < 8:
        problems.append(f"only {len(ids)} candidates")
    if not oracle(frozenset(ids)):
        problems.append("all-FP32 plan fails")
    fp16_passes = oracle(frozenset())
    if fp16_passes != (not known["culprits"]):
        problems.append(f"all-FP16 plan {'passes' if fp16_passes else 'fails'}")
    prof = profile(graph, samples)
    result = search(ids, oracle, order=prof.order, suspects=prof.suspects)
    found = set(result.fp32)
    if found != set(known["culprits"]):
        problems.append(f"search found {sorted(found)}, expected {sorted(known['culprits'])}")
    if not result.minimal:
        problems.append(f"search says {result.minimality}")
    # 1-minimality by direct evaluation (on the oracle, outside the search's count)
    if found and not oracle(frozenset(found)):
        problems.append("the found set fails")
    for member in sorted(found):
        if oracle(frozenset(found - {member})):
            problems.append(f"still passes without {member!r}")
    if name == "accumulation":
        problems += _brute_force(ids, oracle, known)
    line = (
        f"{name:<20} candidates {len(ids):>3}  culprits {sorted(found) if found else '{}'}  "
        f"evaluations {result.evaluations}  [{result.status}]"
    )
    if problems:
        line += "  MISMATCH: " + "; ".join(problems)
    return not problems, line


def _brute_force(ids, oracle, known) -> list[str]:
    """Every subset of the candidates: all 1-minimal sets must have the same size."""
    problems = []
    passes = {}
    for r in range(len(ids) + 1):
        for plan in itertools.combinations(ids, r):
            passes[frozenset(plan)] = oracle(frozenset(plan))
    branches = set(known["branches"])
    for plan, ok in passes.items():
        expected = len(branches - plan) <= known["fp16_budget"]
        if ok != expected:
            problems.append(f"plan {sorted(plan)} {'passes' if ok else 'fails'}, expected otherwise")
            break
    minimal = [p for p, ok in passes.items() if ok and all(not passes[p - {m}] for m in p)]
    sizes = {len(p) for p in minimal}
    if sizes != {known["minimal_size"]}:
        problems.append(f"1-minimal sets have sizes {sorted(sizes)}")
    everything = frozenset(ids)
    single = [c for c in ids if not passes[everything - {c}]]
    if single:
        problems.append(f"a single FP16 node fails: {single}")
    print(
        f"    accumulation brute force: {len(passes)} plans, {sum(passes.values())} pass, "
        f"{len(minimal)} 1-minimal sets, sizes {sorted(sizes)}; no single FP16 node fails: {not single}"
    )
    return problems


def main(argv=None) -> int:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description="Build (and check) the fp16bisect sample models.")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: sample_models/; with --large: build/large/)")
    parser.add_argument("--check", action="store_true", help="verify every model with fp16bisect after writing")
    parser.add_argument("--large", action="store_true",
                        help="write only the 10,000-candidate model (default --out: build/large, git-ignored)")
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"only these models (default all: {', '.join(BUILDERS)})")
    args = parser.parse_args(argv)
    if args.large:
        paths = write_large(args.out or root / "build" / "large")
        print(f"wrote {', '.join(str(p) for p in paths)} ({paths[0].stat().st_size / 1e6:.1f} MB); "
              f"FP32 culprits: {', '.join(large_culprits())}")
        return 0
    args.out = args.out or root / "sample_models"
    unknown = [m for m in args.models if m not in BUILDERS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(BUILDERS)}")
    names = args.models or list(BUILDERS)
    written = write_all(args.out, names)
    print(f"wrote {len(written)} files to {args.out}")
    if not args.check:
        return 0
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    ok = True
    for name in names:
        passed, line = check_model(args.out, name)
        print(line, flush=True)
        ok &= passed
    print("all models check out" if ok else "MISMATCH: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
