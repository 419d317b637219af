"""The kernel plan from captured build-log text, no TensorRT needed (``diagnose/build_log.py`` and
``kernel_plan.py``): the layer list read kernel by kernel, warnings with the names TensorRT lists after them, and
the comparison of two engines: moot pins, where a node's output lives, splits.

The logs are TensorRT-RTX 1.7's, captured from the builds of ``cancelling_pair()``'s two files (the answer, its
Mul and Div pinned, and all-FP16), each tensor trimmed to its name, shape and data type.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import F, make_model

from fp16bisect.artifacts.mixed import convert
from fp16bisect.diagnose.build_log import NoLayerList, messages, parse
from fp16bisect.diagnose.kernel_plan import ACCUMULATION, FP32, Engine, Wiring, compare
from fp16bisect.model.graph import Graph

PINS = ["scale_up", "scale_down"]


def cancelling_pair() -> Graph:
    """x -> mm0 -> x*4096 (scale_up) -> /4096 (scale_down) -> mm1 -> +1: the product passes 65504 wherever |mm0| > 16
    (all-FP16 fails there), and the pair cancels. TensorRT-RTX removes it from the all-FP16 engine (the kernel after
    mm0 is FcAddCast: no Mul) and keeps it, as Casts and two Muls, where it is pinned (FcCastMulMulCast)."""
    from onnx import helper

    w = (np.random.default_rng(0).normal(size=(64, 64)) / 8).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["r"], name="mm0"),
             helper.make_node("Mul", ["r", "k"], ["up"], name="scale_up"),
             helper.make_node("Div", ["up", "k"], ["down"], name="scale_down"),
             helper.make_node("MatMul", ["down", "w"], ["y0"], name="mm1"),
             helper.make_node("Add", ["y0", "b"], ["y"], name="bias")]
    inits = {"k": np.array(4096, np.float32), "ik": np.array(1 / 4096, np.float32), "b": np.array(1, np.float32),
             "w": w}
    return Graph(make_model(nodes, [("x", F, [4, 64])], [("y", F, [4, 64])], inits))


def _line(name, kind, inputs, constants, outputs, nodes, tactic="") -> str:
    def tensors(items):
        return ", ".join(f"{{ Name: {n}, Dimensions: [{s}], Strides: [64,1], StrideOrder: [1,0], Datatype: {d}, "
                         "Format: (Linear) Row major linear format }" for n, s, d in items)

    meta = "".join(f"[ONNX Layer: {n}]" for n in nodes)
    return (f"Name: {name}, LayerType: {kind}, Inputs: [ {tensors(inputs)}], Constants: [{tensors(constants)}], "
            f"Outputs: [ {tensors(outputs)}], TacticName: {tactic}, StreamId: 0, Metadata: {meta}")


X, Y, W = ("x", "4,64", "Float"), ("y", "4,64", "Float"), ("w_constantHalf_myl0", "64,64", "Half")
CAST = _line("__myl_Cast_myl0_0", "kgen", [X], [], [("__myln_k_arg__bb1_2_myl0", "4,64", "Half")],
             ["fp16bisect/cast_fp16/x"], "__myl_Cast_0xae61cbe89175fb24578d0935fb934da8")
ANSWER = [
    "[V] Compiler backend is used during engine build.", "[X] Layers:\n" + "\n".join([
        CAST,
        _line("__myl_FcCastMulMulCast_myl0_1", "runtime_fusion", [("__myln_k_arg__bb1_2_myl0", "4,64", "Half")], [W],
              [("__myln_k_arg__bb1_3_myl0", "4,64", "Half")],
              ["mm0", "fp16bisect/cast_fp32/r", "scale_down", "scale_up", "fp16bisect/cast_fp16/down"]),
        _line("__myl_FcAddCast_myl0_2", "runtime_fusion", [("__myln_k_arg__bb1_3_myl0", "4,64", "Half")], [W], [Y],
              ["fp16bisect/cast_output/y", "bias", "mm1"])]) + "\n\nI/O Tensors:\n Name: x, IOMode: Input",
    "[V] Engine generation completed in 0.15 seconds."]
FP16 = [
    "[X] Layers:\n" + "\n".join([
        CAST.replace("__myln_k_arg__bb1_2_myl0", "r.1_2_myl0"),
        _line("mm0_myl0_1", "gemm", [("r.1_2_myl0", "4,64", "Half")], [W, ("__mye207mm0_alpha_myl0", "1", "Float")],
              [("__myln_k_arg__bb1_3_myl0", "4,64", "Half")], ["mm0"], "__myelin_CASK_STUB"),
        _line("__myl_FcAddCast_myl0_2", "runtime_fusion", [("__myln_k_arg__bb1_3_myl0", "4,64", "Half")], [W], [Y],
              ["fp16bisect/cast_output/y", "bias", "mm1", "scale_down", "scale_up"])])]
LAYERNORM_WARNING = ["[X] Found and reassigned Myelin backends for LayerNorm nodes",
                     "[W] Detected layernorm nodes in FP16.", "[X] ln1_mean,ln1_var,ln2_mean,ln2_var",
                     "[W] Running layernorm after self-attention with FP16 Reduce or Pow may cause overflow.",
                     "[X] After Myelin optimization: 1 layers"]


def engines(fp16_log=FP16):
    graph = cancelling_pair()
    answer = Engine(parse(ANSWER), Wiring.of(convert(graph, PINS).model, graph))
    return graph, answer, Engine(parse(fp16_log), Wiring.of(convert(graph, []).model, graph))


def test_the_layer_list_is_read_kernel_by_kernel():
    kernels = parse(ANSWER).kernels
    assert [k.name for k in kernels] == ["__myl_Cast_myl0_0", "__myl_FcCastMulMulCast_myl0_1", "__myl_FcAddCast_myl0_2"]
    fused = kernels[1]
    assert fused.layer_type == "runtime_fusion" and fused.ops == ("Fc", "Cast", "Mul", "Mul", "Cast")
    assert [t.dtype for t in fused.inputs] == ["float16"] and [t.dtype for t in fused.outputs] == ["float16"]
    assert [(t.name, t.dtype) for t in fused.constants] == [("w_constantHalf_myl0", "float16")]
    assert fused.nodes == ("mm0", "fp16bisect/cast_fp32/r", "scale_down", "scale_up", "fp16bisect/cast_fp16/down")
    assert [t.dtype for t in kernels[2].outputs] == ["float32"]  # y, the model's FP32 output
    gemm = parse(FP16).kernels[1]
    assert gemm.ops is None and gemm.tactic == "__myelin_CASK_STUB"  # a GEMM's name lists no ops


@pytest.mark.parametrize("form", ["a message an entry", "one text", "lines as Polygraphy indents them"])
def test_the_log_reads_the_same_one_message_an_entry_one_text_or_indented_lines(form):
    if form == "one text":
        log = ["\n".join(ANSWER)]
    elif form == "lines as Polygraphy indents them":
        log = "\n".join(ANSWER).replace("\nName: ", "\n    Name: ").split("\n")
    else:
        log = ANSWER
    assert parse(log) == parse(ANSWER) and len(parse(log).kernels) == 3


def test_a_warning_keeps_the_names_tensorrt_lists_in_the_message_after_it():
    warnings = parse(FP16 + LAYERNORM_WARNING).warnings
    assert [(w.text, w.listed) for w in warnings] == [
        ("Detected layernorm nodes in FP16.", ("ln1_mean", "ln1_var", "ln2_mean", "ln2_var")),
        ("Running layernorm after self-attention with FP16 Reduce or Pow may cause overflow.", ())]
    assert messages(["no severity here", "nor here"]) == [("", "no severity here"), ("", "nor here")]


def test_a_log_without_the_layer_list_is_refused():
    with pytest.raises(NoLayerList, match="no engine layer list"):
        parse(["[W] Detected layernorm nodes in FP16.", "[V] Engine generation completed in 0.15 seconds."])


def test_the_cancelled_pair_is_moot_and_the_answers_engine_computes_it_in_one_kernel_with_mm0():
    _graph, answer, fp16 = engines()
    plan = compare(answer, fp16, {"scale_up": ("Mul", FP32), "scale_down": ("Div", FP32)})
    up, down = plan.placements
    assert "FcAddCast_myl0_2 names it but computes no Mul: the compiler removed it" in up.moot
    assert "computes no Div/Mul" in down.moot
    assert up.computed and down.computed  # FcCastMulMulCast: the pinned pair survives as two Muls between Casts
    assert [k.name for k in up.kernels] == ["__myl_FcCastMulMulCast_myl0_1"]
    assert up.kernels[0].covers == ("mm0", "scale_up", "scale_down") and up.kernels[0].casts == 2  # graph order
    assert (up.kernels[0].inputs, up.kernels[0].outputs) == (("float16",), ("float16",))
    assert up.output == "internal"  # read by scale_down in its own kernel
    assert down.output == "stored"  # read (through its Cast) by mm1, in the next kernel
    assert plan.kernels == plan.fp16_kernels == 3 and not plan.splits  # regrouped, not split: no more kernels
    assert plan.outputs == {"stored": 2, "internal": 3, "spread": 0}  # mm0, scale_up, scale_down, mm1, bias
    text = str(plan)
    assert "moot: scale_up: the all-FP16 engine's __myl_FcAddCast_myl0_2 names it but computes no Mul" in text
    assert plan.to_dict()["nodes"][0]["moot"] is True


def test_a_kernel_that_lists_the_op_or_lists_no_ops_makes_no_moot_claim():
    for renamed in ("__myl_FcMulAddCast_myl0_2", "mm1_myl0_2"):  # a Mul in its ops; a GEMM-like name: no ops told
        fp16_log = [FP16[0].replace("__myl_FcAddCast_myl0_2", renamed)]
        _graph, answer, fp16 = engines(fp16_log)
        plan = compare(answer, fp16, {"scale_up": ("Mul", FP32), "scale_down": ("Div", FP32)})
        assert not plan.moot, (renamed, [p.moot for p in plan.placements])


def test_a_node_no_all_fp16_kernel_names_is_moot_and_a_node_of_an_op_without_words_is_never_guessed():
    fp16_log = [FP16[0].replace("[ONNX Layer: scale_down][ONNX Layer: scale_up]", "")]
    _graph, answer, fp16 = engines(fp16_log)
    plan = compare(answer, fp16, {"scale_up": ("Mul", FP32), "mm1": ("MatMul", ACCUMULATION)})
    assert plan.placements[0].moot.startswith("no kernel of the all-FP16 engine names it")
    assert not plan.placements[1].moot and plan.placements[1].state == ACCUMULATION
    _graph, answer, fp16 = engines()
    assert not compare(answer, fp16, {"scale_up": ("SomeCustomOp", FP32)}).moot


def test_where_kernels_name_no_node_absence_proves_nothing_and_is_said_so():
    """Myelin leaves some kernels' metadata empty (PP-OCRv4's recognizer: its squeeze-excitation FC kernels; its
    detector: 41 of 124 kernels), so a node no kernel names may be computed in one of them: never moot, "not told"."""
    unnamed = "[ONNX Layer: fp16bisect/cast_output/y][ONNX Layer: bias][ONNX Layer: mm1]"
    _graph, answer, fp16 = engines([FP16[0].replace(unnamed + "[ONNX Layer: scale_down][ONNX Layer: scale_up]", "")])
    answer = Engine(parse([m.replace(unnamed, "") for m in ANSWER]), answer.wiring)
    plan = compare(answer, fp16, {"scale_up": ("Mul", FP32), "scale_down": ("Div", FP32)})
    assert not plan.moot and plan.fp16_unnamed == plan.unnamed == 1
    up, down = plan.placements
    assert (up.output, down.output) == ("internal", "not told")  # down's reader mm1 may be in the unnamed kernel
    assert ("scale_up: no kernel of the all-FP16 engine names it, and 1 of its kernels name no node: whether it "
            "computes it is not told") in plan.lines()
    assert "1 kernels name no ONNX node (all-FP16: 1)" in plan.summary()


def test_warnings_that_name_model_nodes_are_kept_with_those_nodes():
    graph = cancelling_pair()
    log = ANSWER + ["[W] Detected layernorm nodes in FP16.", "[X] mm1,not_a_node", "[W] Weights of bias are odd.",
                    "[W] Nothing named here."]
    answer = Engine(parse(log), Wiring.of(convert(graph, PINS).model, graph))
    _graph, _answer, fp16 = engines()
    plan = compare(answer, fp16, {"scale_up": ("Mul", FP32)})
    assert [str(w) for w in plan.warnings] == ["Detected layernorm nodes in FP16: mm1", "Weights of bias are odd: bias"]
    assert "TensorRT warns: Detected layernorm nodes in FP16: mm1" in plan.lines()
