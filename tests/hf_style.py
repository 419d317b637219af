"""Transformer blocks as Hugging Face exports them, built with onnx.helper (no torch): the attention mask is
``Where(mask, 0, torch.finfo(torch.float32).min)`` (-3.4028235e38, a Constant node as the exporter writes it),
the LayerNorm is decomposed with epsilon 1e-12 (BERT's, below FP16's smallest subnormal).

``bert_block``: a padding mask (the second row's last two positions padded). ``gpt_block``: a causal mask
and a left-padded row, whose first query sees no key at all: in FP32 its row of scores is uniformly
-3.4e38 and softmax averages; were the constant cast to -inf, the row would be NaN.
``planted``: one input element of 400 makes the LayerNorm's squared deviation pass 65504 (x^2 overflows
in FP16): the known culprits are then ``ln_pow`` and ``ln_var``.
"""

from __future__ import annotations

import numpy as np
from conftest import F, make_model
from onnx import TensorProto, helper, numpy_helper

FINFO_MIN = np.float32(np.finfo(np.float32).min)
CULPRITS = {"ln_pow", "ln_var"}
B, T, D = 2, 4, 8


def _block(mask_nodes, planted: bool, opset: int, seed: int):
    rng = np.random.default_rng(seed)
    ln_axes = {"axes": [-1]} if opset < 18 else {}
    ln_extra = [] if opset < 18 else ["last_axis"]
    nodes = [
        helper.make_node("Constant", [], ["/m/Constant_11_output_0"], name="/m/Constant_11",
                         value=numpy_helper.from_array(np.array(FINFO_MIN), "v")),
        *mask_nodes,
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        helper.make_node("Mul", ["scores", "inv_sqrt_d"], ["scaled"], name="scale"),
        helper.make_node("Add", ["scaled", "mask_add"], ["masked"], name="mask_add_node"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="ctx"),
        helper.make_node("Add", ["ctx", "x"], ["h"], name="residual"),
        helper.make_node("ReduceMean", ["h", *ln_extra], ["mu"], name="ln_mean", **ln_axes),
        helper.make_node("Sub", ["h", "mu"], ["dev"], name="ln_sub"),
        helper.make_node("Pow", ["dev", "two"], ["sq"], name="ln_pow"),
        helper.make_node("ReduceMean", ["sq", *ln_extra], ["var"], name="ln_var", **ln_axes),
        helper.make_node("Add", ["var", "eps"], ["var_eps"], name="ln_eps"),
        helper.make_node("Sqrt", ["var_eps"], ["std"], name="ln_sqrt"),
        helper.make_node("Div", ["dev", "std"], ["normed"], name="ln_div"),
        helper.make_node("Mul", ["normed", "gamma"], ["scaled_ln"], name="ln_gamma"),
        helper.make_node("Add", ["scaled_ln", "beta"], ["y"], name="ln_beta"),
    ]
    inits = {
        "wq": rng.normal(0, 0.3, (D, D)).astype(np.float32), "wk": rng.normal(0, 0.3, (D, D)).astype(np.float32),
        "wv": rng.normal(0, 0.3, (D, D)).astype(np.float32), "inv_sqrt_d": np.array(D**-0.5, np.float32),
        "zero": np.array(0.0, np.float32), "two": np.array(2.0, np.float32), "eps": np.array(1e-12, np.float32),
        "gamma": rng.normal(1, 0.1, D).astype(np.float32), "beta": rng.normal(0, 0.1, D).astype(np.float32),
    }
    if opset >= 18:
        inits["last_axis"] = np.array([-1], np.int64)
    model = make_model(nodes, [("x", F, [B, T, D]), ("attention_mask", TensorProto.INT64, [B, T])],
                       [("y", F, [B, T, D])], inits, opset=opset)
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    if planted:
        x[0, 1, 3] = 400.0  # (400 - mean)^2 > 65504
    return model, x


def bert_block(planted: bool = True, opset: int = 17, seed: int = 0):
    """(model, inputs): right padding, mask (B, 1, T) added to the scores."""
    mask_nodes = [
        helper.make_node("Cast", ["attention_mask"], ["mask_bool"], name="/m/Cast", to=TensorProto.BOOL),
        helper.make_node("Where", ["mask_bool", "zero", "/m/Constant_11_output_0"], ["mask_2d"], name="/m/Where_1"),
        helper.make_node("Unsqueeze", ["mask_2d", "axis1"], ["mask_add"], name="/m/Unsqueeze"),
    ]
    model, x = _block(mask_nodes, planted, opset, seed)
    model.graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    mask = np.ones((B, T), np.int64)
    mask[1, -2:] = 0
    return model, {"x": x, "attention_mask": mask}


def gpt_block(planted: bool = True, opset: int = 17, seed: int = 1):
    """(model, inputs): causal mask and left padding, mask (B, T, T) added to the scores."""
    mask_nodes = [
        helper.make_node("Cast", ["attention_mask"], ["pad_bool"], name="/m/Cast", to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["pad_bool", "axis1"], ["pad_3d"], name="/m/Unsqueeze"),
        helper.make_node("And", ["causal", "pad_3d"], ["allowed"], name="/m/And"),
        helper.make_node("Where", ["allowed", "zero", "/m/Constant_11_output_0"], ["mask_add"], name="/m/Where_1"),
    ]
    model, x = _block(mask_nodes, planted, opset, seed)
    model.graph.initializer.extend([numpy_helper.from_array(np.array([1], np.int64), "axis1"),
                                    numpy_helper.from_array(np.tril(np.ones((T, T), bool)), "causal")])
    mask = np.ones((B, T), np.int64)
    mask[1, :2] = 0
    return model, {"x": x, "attention_mask": mask}
