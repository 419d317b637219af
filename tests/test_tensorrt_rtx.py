"""Proof from a real TensorRT parser (TensorRT-RTX, strongly typed) that a pin in the mixed model takes effect.

TensorRT-RTX parses ONNX and builds engines on a machine without a GPU (it
cannot run them). Its networks are always strongly typed: each layer's types
come from the ONNX graph, exactly as in TensorRT 11. For every sample model
and several plans: the layers TensorRT creates for a pinned node produce
FLOAT, those of every other candidate produce HALF, and the engine builds.
Every parse and build goes through fp16bisect's adapter over Polygraphy's
loaders (``fp16bisect.backends.tensorrt.engine``: ``parse``, ``build``,
``build_logged``), the code the tensorrt backend builds with on a GPU.
"""

import random
import re
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import SAMPLE_MODELS as MODELS
from conftest import SAMPLES

from fp16bisect.backends.tensorrt import engine as E
from fp16bisect.backends.tensorrt import load as trt_load
from fp16bisect.model.samples import sample_shapes
from fp16bisect.model.weights import inline
from fp16bisect.model.graph import Graph
from fp16bisect.artifacts.mixed import mixed_model
from fp16bisect.artifacts.exports import trtexec_layer_name

trt = pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX is a test extra: pip install '.[test]'")


@pytest.fixture(autouse=True)
def tensorrt_rtx(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # load() takes tensorrt_rtx


def parse(model):
    """(builder, network, parser) TensorRT-RTX's parser makes of ``model`` (through Polygraphy's NetworkFromOnnxBytes;
    the parser holds the network's weights: keep it while using the network)."""
    return E.parse(trt_load.load(), inline(model).SerializeToString())


def build(model, **settings) -> bytes:
    """The engine of ``model``, built as the tensorrt backend builds a plan's file."""
    return E.build(trt_load.load(), inline(model).SerializeToString(), E.Settings(**settings)).engine


def layer_node_ids(graph: Graph, layer) -> set:
    """The fp16bisect node ids a layer belongs to, from its metadata (never its name)."""
    meta = layer.metadata
    if not meta.startswith("[ONNX Layer: "):
        return set()  # a helper layer: constants, broadcasts, shape shuffles
    name = meta[len("[ONNX Layer: "):].split("]")[0]
    nodes = [n for n in graph.nodes if trtexec_layer_name(n) == name]
    if len(nodes) > 1:  # duplicate ONNX names: the layer's outputs tell which node
        outs = {layer.get_output(i).name for i in range(layer.num_outputs)}
        nodes = [n for n in nodes if outs & set(n.outputs)]
    return {n.id for n in nodes}


def plans(graph: Graph, culprits):
    ids = [n.id for n in graph.candidates]
    rng = random.Random(len(ids))
    return [[], list(culprits), ids, rng.sample(ids, len(ids) // 2)]


@pytest.mark.parametrize("name", MODELS)
def test_pinned_layers_are_float_the_others_half_and_the_engine_builds(name, known):
    graph = Graph.load(SAMPLES / f"{name}.onnx")
    candidates = {n.id for n in graph.candidates}
    for plan in plans(graph, known[name]["culprits"]):
        _builder, network, _parser = parse(mixed_model(graph, plan))
        checked = set()
        for i in range(network.num_layers):
            layer = network.get_layer(i)
            for node_id in layer_node_ids(graph, layer) & candidates:
                want = trt.DataType.FLOAT if node_id in plan else trt.DataType.HALF
                for k in range(layer.num_outputs):
                    dtype = layer.get_output(k).dtype
                    if dtype in (trt.DataType.FLOAT, trt.DataType.HALF):
                        assert dtype == want, (name, node_id, layer.name, dtype)
                checked.add(node_id)
        assert checked == candidates, f"{name}: no layer found for {sorted(candidates - checked)[:5]}"
        io = [network.get_input(i) for i in range(network.num_inputs)]
        io += [network.get_output(i) for i in range(network.num_outputs)]
        assert all(t.dtype == trt.DataType.FLOAT for t in io)  # FP32 I/O by default
    assert len(build(mixed_model(graph, plan))) > 0


def test_fp16_io_reaches_the_network_inputs_and_outputs():
    graph = Graph.load(SAMPLES / "transformer_block.onnx")
    _builder, network, _parser = parse(mixed_model(graph, ["ln1_square", "ln1_var"], fp16_io=True))
    assert network.get_input(0).dtype == trt.DataType.HALF
    assert network.get_output(0).dtype == trt.DataType.HALF


def test_a_dynamic_input_builds_with_a_profile_from_the_samples(tmp_path):
    """Real models (PP-OCRv4's recognizer) have dynamic batch and width: TensorRT needs a profile to build."""
    import numpy as np
    import onnx

    model = onnx.load(SAMPLES / "transformer_block.onnx")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "seq"
    mixed = mixed_model(Graph(model), ["ln1_square", "ln1_var"])
    with pytest.raises(E.BuildError, match="no sample shape for input.s. x: pass samples for every input"):
        build(mixed)  # Polygraphy alone would build it for a made-up length
    shapes = sample_shapes([{"x": np.zeros((1, 8, 64))}, {"x": np.zeros((1, 16, 64))}])
    assert len(build(mixed, shapes=shapes, opt_level=0)) > 0
    log = logged(mixed, {"x": (1, 16, 64)})
    assert log.engine and "{x [min=(1, 16, 64), opt=(1, 16, 64), max=(1, 16, 64)]}" in " ".join(map(bare, log.lines))


def test_build_logged_builds_for_the_gpu_asked_and_each_log_has_every_warning(tmp_path):
    """``engine.build_logged`` (the kernel-plan report's build): CreateConfigRTX's compute capability, and every
    line of each build, though Polygraphy says a repeated warning once per process."""
    path = tmp_path / "all_fp16.onnx"
    path.write_bytes(inline(mixed_model(Graph.load(SAMPLES / "transformer_block.onnx"), [])).SerializeToString())
    logs = [E.build_logged(path, compute_capability=(8, 9)) for _ in range(2)]
    for log in logs:
        assert log.engine and "[I] Setting 1 target compute capabilities: [(8, 9)]" in log.lines
        assert sum(line.startswith("[X] Layers:\n    Name: ") for line in log.lines) == 1
    warned = [[line for line in log.lines if line.startswith("[W] Detected layernorm nodes in FP16")] for log in logs]
    assert warned[0] and warned[1] == warned[0]
    with pytest.raises(E.ParseError, match="TensorRT's ONNX parser"):
        E.build_logged(tmp_path / "missing.onnx")


# --------------------------------------------------------------------------- what the built engine runs

# TensorRT-RTX cannot deserialise an engine without a GPU, so IEngineInspector is out of reach; with
# ProfilingVerbosity.DETAILED and a verbose logger the builder itself prints the engine's layer list at the end
# of a build: one line per kernel, "Name: ..., LayerType: ..., Inputs: [ { Name: ..., Datatype: Half, ... }],
# Constants: [...], Outputs: [...], TacticName: ..., StreamId: 0, Metadata: [ONNX Layer: a]\x1f[ONNX Layer: b]".
LAYERNORM_VARIANCE = {"transformer_block": ["ln1_square", "ln1_var"], "two_branches": ["a_square", "a_mean_sq"],
                      "fp16_safe": ["layernorm"]}  # a LayerNorm's x^2 and mean(x^2) (fp16_safe: the op itself)


def logged(model, shapes=None) -> E.Built:
    """``engine.build_logged`` on ``model`` written to a file; ``shapes``: input -> its one shape."""
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "model.onnx"
        path.write_bytes(inline(model).SerializeToString())
        return E.build_logged(path, shapes={name: (shape,) * 3 for name, shape in (shapes or {}).items()})


def build_logged(model, shapes=None):
    """((builder, network, parser) parsed, serialized engine or None, every message the build logged, verbose
    included, without the severity Polygraphy's logger opens it with)."""
    log = logged(model, shapes)
    return parse(model), log.engine, [bare(line) for line in log.lines]


def bare(line: str) -> str:
    """A message as TensorRT said it: without Polygraphy's "[X] " and the indent of its further lines."""
    return re.sub(r"\n {4}", "\n", line[4:])


def printed_layers(messages) -> list:
    """The engine's layers from the "Layers:" list the build printed: EngineLayer (name, ONNX nodes, tensor
    kinds of inputs then outputs; constants left out)."""
    from fp16bisect.backends.tensorrt.inspection import EngineLayer, metadata_nodes, tensor_kind

    listing = [m for m in messages if m.startswith("Layers:\n")]
    assert len(listing) == 1, "no engine layer list in the build log (ProfilingVerbosity.DETAILED, verbose logger)"
    found = []
    for line in listing[0].split("\n")[1:]:
        if not line.startswith("Name: "):
            continue
        name = line[len("Name: "):line.index(", LayerType: ")]
        head, tail = line.split(", Outputs: [", 1)
        inputs = head.split("Inputs: [", 1)[1].split("], Constants: [")[0]
        outputs = re.split(r"\], (?:TacticName|TacticValue|StreamId):", tail)[0]
        tensors = [(n, tensor_kind(d)) for part in (inputs, outputs)
                   for n, d in re.findall(r"\{ Name: (.*?), Dimensions: .*?Datatype: (\w+)", part)]
        metadata = line.split(", Metadata: ", 1)[1] if ", Metadata: " in line else ""
        found.append(EngineLayer(name, metadata_nodes(metadata), tuple(tensors)))
    return found


def kernel_ops(layer) -> list:
    """A fused kernel's operations, from its name: __myl_MeanSubCastMulMeanCast_myl0_7 -> [Mean, Sub, Cast, ...]."""
    body = re.sub(r"_myl\d+_\d+$", "", layer.name).removeprefix("__myl_")
    return re.findall(r"[A-Z][a-z]*", body)


def fp16_layernorm_nodes(messages) -> set:
    """The Reduce/Pow layers TensorRT reports as "layernorm nodes in FP16" (the message after its warning)."""
    for i, message in enumerate(messages[:-1]):
        if message.startswith("Detected layernorm nodes in FP16"):
            return set(messages[i + 1].split(","))
    return set()


def assert_pinned_fp32_rest_half(graph: Graph, plan, layers):
    """Every engine layer of a pinned node has an FP32 tensor or our FP16<->FP32 casts inside it (the pinned
    work is FP32 inside the kernel); every layer of unpinned candidates only (no cast of ours) is all FP16."""
    pinned = {trtexec_layer_name(graph.by_id[n]) for n in plan}
    computing = {trtexec_layer_name(n) for n in graph.candidates}
    seen = set()
    for layer in layers:
        nodes = set(layer.nodes)
        casts = {n for n in nodes if n.startswith("fp16bisect/")}
        kinds = {kind for _name, kind in layer.tensors if kind in ("float32", "float16")}
        if nodes & pinned:
            seen |= nodes & pinned
            assert "float32" in kinds or casts, (layer, "a pinned node in an all-FP16 kernel with no cast of ours")
        elif nodes & computing and not casts:
            assert kinds == {"float16"}, (layer, "an FP16 node's kernel with FP32 tensors")
    return seen


@pytest.mark.parametrize("name", MODELS)
def test_a_pinned_layernorm_builds_and_the_engine_runs_it_in_fp32_the_rest_in_fp16(name, known):
    graph = Graph.load(SAMPLES / f"{name}.onnx")
    plan = LAYERNORM_VARIANCE.get(name) or sorted(known[name]["culprits"])
    (_b, network, _p), engine, messages = build_logged(mixed_model(graph, plan))
    assert engine is not None and len(engine) > 0
    for i in range(network.num_layers):  # the parsed network: the pinned nodes' layers are FLOAT
        layer = network.get_layer(i)
        if layer_node_ids(graph, layer) & set(plan):
            assert all(layer.get_output(k).dtype == trt.DataType.FLOAT for k in range(layer.num_outputs)), layer.name
    seen = assert_pinned_fp32_rest_half(graph, plan, printed_layers(messages))
    assert seen, f"{name}: no engine layer names a pinned node"
    assert not fp16_layernorm_nodes(messages) & {trtexec_layer_name(graph.by_id[n]) for n in plan}


# PP-OCRv4 rec (rapidocr-onnxruntime 1.4.4): a CNN, then two transformer blocks with decomposed LayerNorms
# (ReduceMean, Sub, Pow(2), ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta). Dynamic width: one fixed shape.
REC_SHAPE = {"x": (1, 3, 48, 320)}
REC_LN1 = ["p2o.ReduceMean.0", "p2o.Sub.0", "p2o.Pow.0", "p2o.ReduceMean.2", "p2o.Add.232", "p2o.Sqrt.0",
           "p2o.Div.28", "p2o.Mul.178", "p2o.Add.234"]
REC_LN1_VARIANCE = ["p2o.Pow.0", "p2o.ReduceMean.2"]
REC_OTHER_VARIANCES = ["p2o.Pow.2", "p2o.ReduceMean.6", "p2o.Pow.4", "p2o.ReduceMean.10", "p2o.Pow.6",
                       "p2o.ReduceMean.14", "p2o.Pow.8", "p2o.ReduceMean.18"]


@pytest.fixture(scope="module")
def rec():
    from real_models import PP_OCRV4_REC, real_model

    graph = Graph.load(real_model(PP_OCRV4_REC))
    ops = [graph.by_id[n].op_type for n in REC_LN1]
    assert ops == ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]
    return graph


def test_pp_ocrv4_rec_a_pinned_layernorm_variance_computes_in_fp32_inside_its_kernel(rec):
    (_b, network, _p), engine, messages = build_logged(mixed_model(rec, REC_LN1_VARIANCE), REC_SHAPE)
    assert engine is not None and len(engine) > 0
    floats = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for node in layer_node_ids(rec, layer) & {*REC_LN1_VARIANCE, *REC_OTHER_VARIANCES}:
            floats.setdefault(node, set()).update(layer.get_output(k).dtype for k in range(layer.num_outputs))
    assert {n for n, d in floats.items() if d == {trt.DataType.FLOAT}} == set(REC_LN1_VARIANCE)
    assert {n for n, d in floats.items() if d == {trt.DataType.HALF}} == set(REC_OTHER_VARIANCES)
    layers = printed_layers(messages)
    assert_pinned_fp32_rest_half(rec, REC_LN1_VARIANCE, layers)
    # Myelin fuses the whole LayerNorm into one kernel whose boundary tensors are FP16: our casts to FP32 and
    # back are inside it, around exactly the pinned Pow (lowered to Mul) and ReduceMean (Mean) ...
    mine = [layer for layer in layers if "p2o.Pow.0" in layer.nodes]
    assert len(mine) == 1 and {"p2o.ReduceMean.2", "fp16bisect/cast_fp32/p2o.Sub.1",
                               "fp16bisect/cast_fp16/p2o.ReduceMean.3"} <= set(mine[0].nodes)
    assert "Cast Mul Mean Cast" in " ".join(kernel_ops(mine[0]))
    # ... while every unpinned LayerNorm squares and averages in FP16: no cast between Sub, Mul and Mean
    others = [layer for layer in layers if set(layer.nodes) & {"p2o.Pow.2", "p2o.Pow.4", "p2o.Pow.6", "p2o.Pow.8"}]
    assert len(others) == 4 and all("Sub Mul Mean" in " ".join(kernel_ops(layer)) for layer in others)
    # TensorRT's own warning lists the LayerNorm Pow/ReduceMean layers that run in FP16: all but the pinned
    fp16 = fp16_layernorm_nodes(messages)
    assert set(REC_OTHER_VARIANCES) <= fp16 and not fp16 & set(REC_LN1_VARIANCE)


def test_pp_ocrv4_rec_a_pinned_region_passes_fp32_tensors_between_kernels_the_rest_fp16(rec):
    plan = [*REC_LN1, "p2o.MatMul.0"]  # LayerNorm 1 and the QKV projection that reads it
    _network, engine, messages = build_logged(mixed_model(rec, plan), REC_SHAPE)
    assert engine is not None
    layers = printed_layers(messages)
    assert_pinned_fp32_rest_half(rec, plan, layers)
    ln = [layer for layer in layers if "p2o.Pow.0" in layer.nodes]
    qkv = [layer for layer in layers if "p2o.MatMul.0" in layer.nodes]
    assert len(ln) == len(qkv) == 1
    handed = {name for name, kind in ln[0].tensors if kind == "float32"} & \
        {name for name, kind in qkv[0].tensors if kind == "float32"}
    assert handed, "the LayerNorm kernel hands the projection an FP32 tensor"
    assert not fp16_layernorm_nodes(messages) & set(plan)


@pytest.mark.parametrize("opset", [12, 14, 15])
def test_an_fp16_batchnorm_with_a_1e8_variance_parses_in_half_and_builds(opset):
    """The all-FP16 file of conv -> BatchNormalization (running variance 1e8) -> relu, as the writer writes it at
    each opset (folded into FP16 Mul and Add at 12, statistics kept in FP32 at 14's mean/var and all of 15's): a
    strongly typed TensorRT parses it with every layer of the three nodes in HALF, and the engine builds."""
    from conftest import conv_bn_relu

    graph = Graph(conv_bn_relu(opset=opset))
    _builder, network, _parser = parse(mixed_model(graph, []))
    seen = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for node_id in layer_node_ids(graph, layer):
            dtypes = {layer.get_output(k).dtype for k in range(layer.num_outputs)}
            seen.setdefault(node_id, set()).update(dtypes & {trt.DataType.FLOAT, trt.DataType.HALF})
    assert seen == {"conv": {trt.DataType.HALF}, "bn": {trt.DataType.HALF}, "relu": {trt.DataType.HALF}}, seen
    assert len(build(mixed_model(graph, []))) > 0


@pytest.mark.parametrize("name", ["transformer_block", "cnn_batchnorm"])
def test_a_bf16_file_parses_with_the_pinned_layers_float_the_rest_bf16_and_builds(name, known):
    """``--precision bf16``: the written file (bfloat16 tensors and Casts, opset 22 for a model below it) parses
    in TensorRT-RTX with every pinned node's layers producing FLOAT and every other candidate's BF16."""
    from fp16bisect.model.precision import BF16

    graph = Graph.load(SAMPLES / f"{name}.onnx", precision=BF16)
    candidates = {n.id for n in graph.candidates}
    plan = sorted(known[name]["culprits"])
    _builder, network, _parser = parse(mixed_model(graph, plan))
    kinds = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for node_id in layer_node_ids(graph, layer) & candidates:
            for k in range(layer.num_outputs):
                dtype = layer.get_output(k).dtype
                if dtype in (trt.DataType.FLOAT, trt.DataType.HALF, trt.DataType.BF16):
                    kinds.setdefault(node_id, set()).add(dtype)
    assert set(kinds) == candidates, sorted(candidates - set(kinds))[:5]
    for node_id, dtypes in kinds.items():
        assert dtypes == {trt.DataType.FLOAT if node_id in plan else trt.DataType.BF16}, (node_id, dtypes)
    assert len(build(mixed_model(graph, plan))) > 0


# --------------------------------------------------------------------------- FP32 accumulation (the third state)

# relu -> mm1 -> mm2 -> mm3 -> relu, 256-wide weights: each MatMul becomes its own gemm kernel, so the layer list
# shows mm2's kernel boundary tensors and its weight as the engine stores them.
def matmul_chain() -> Graph:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {f"w{i}": (rng.normal(size=(256, 256)) / 16).astype(np.float32) for i in (1, 2, 3)}
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w1"], ["m1"], name="mm1"),
             helper.make_node("MatMul", ["m1", "w2"], ["m2"], name="mm2"),
             helper.make_node("MatMul", ["m2", "w3"], ["m3"], name="mm3"),
             helper.make_node("Relu", ["m3"], ["y"], name="relu3")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return Graph(model)


def kernel_of(messages, node: str) -> tuple:
    """(the one engine layer that computes ``node``, its printed line): the kernel, its tensors, its constants."""
    layers = [layer for layer in printed_layers(messages) if node in layer.nodes]
    assert len(layers) == 1, (node, layers)
    listing = next(m for m in messages if m.startswith("Layers:\n"))
    line = next(text for text in listing.split("\n") if text.startswith(f"Name: {layers[0].name}, "))
    return layers[0], line


def constant_kinds(line: str) -> list:
    from fp16bisect.backends.tensorrt.inspection import tensor_kind

    constants = line.split("Constants: [", 1)[1].split("], Outputs: [", 1)[0]
    return [(name, tensor_kind(kind)) for name, kind in
            re.findall(r"\{ Name: (.*?), Dimensions: (?:\[[\d,]+\]).*?Datatype: (\w+)", constants)]


def weights_of(line: str) -> list:
    """A GEMM kernel's constants but its alpha and beta scalars: its weight, (name, kind)."""
    return [(name, kind) for name, kind in constant_kinds(line) if not re.search(r"_(alpha|beta)_myl", name)]


CASK_STUB = "__myelin_CASK_STUB"


def test_a_matmul_in_fp32_accumulation_is_one_gemm_kernel_with_fp16_inputs_outputs_and_weight():
    from fp16bisect.artifacts.accumulation import CAST_PREFIX
    from fp16bisect.model.plan_states import accumulating

    graph = matmul_chain()
    for plan in ({accumulating("mm2")}, {accumulating("mm2"), "mm1", "mm3"}):  # FP16 neighbours, FP32 neighbours
        _network, engine, messages = build_logged(mixed_model(graph, plan))
        assert engine is not None and len(engine) > 0
        kernel, line = kernel_of(messages, "mm2")
        # the Casts up and down are fused into the GEMM: no kernel of their own, no FP32 tensor between them
        ours = {n for n in kernel.nodes if n.startswith(f"{CAST_PREFIX}mm2/")}
        assert ours == {f"{CAST_PREFIX}mm2/in/{'m1_fp16' if 'mm1' in plan else 'm1'}", f"{CAST_PREFIX}mm2/in/w2",
                        f"{CAST_PREFIX}mm2/out/m2"}, kernel
        assert all(not n.startswith(CAST_PREFIX) for layer in printed_layers(messages) if layer.name != kernel.name
                   for n in layer.nodes)
        assert "LayerType: gemm" in line
        assert {kind for _name, kind in kernel.tensors} == {"float16"}, kernel  # FP16 in, FP16 out
        # the weight as the file stores it (FP16, read directly: no FP32 copy, no conversion by the builder); the
        # GEMM's alpha and beta scalars are FP32 in every plan, all-FP16 included, so they tell nothing
        assert weights_of(line) == [("w2_constantHalf_myl0", "float16")], constant_kinds(line)
        assert f"TacticName: {CASK_STUB}," in line  # the GEMM tactic, and so its accumulator, is chosen at JIT time


def test_the_same_matmul_pinned_with_fp32_neighbours_is_a_gemm_with_fp32_inputs_outputs_and_weight():
    graph = matmul_chain()
    _network, engine, messages = build_logged(mixed_model(graph, ["mm1", "mm2", "mm3"]))
    assert engine is not None
    kernel, line = kernel_of(messages, "mm2")
    assert "LayerType: gemm" in line and {kind for _name, kind in kernel.tensors} == {"float32"}, kernel
    assert weights_of(line) == [("w2_constantFloat_myl0", "float32")]


def test_a_lone_pinned_matmul_between_fp16_tensors_becomes_the_same_fp16_io_gemm_with_its_weight_in_fp16():
    """What TensorRT-RTX 1.7 does with a pin whose neighbours are FP16: the boundary Casts fuse into the GEMM, whose
    inputs, outputs and weight (an FP32 initializer in the file, converted by the builder) are all FP16 in the
    layer list: on the engine, a lone pinned GEMM is at best an FP32-accumulation GEMM with FP16 weights."""
    graph = matmul_chain()
    _network, engine, messages = build_logged(mixed_model(graph, ["mm2"]))
    assert engine is not None
    kernel, line = kernel_of(messages, "mm2")
    assert {"fp16bisect/cast_fp32/m1", "fp16bisect/cast_fp16/m2"} <= set(kernel.nodes)
    assert "LayerType: gemm" in line and {kind for _name, kind in kernel.tensors} == {"float16"}, kernel
    assert [kind for _name, kind in weights_of(line)] == ["float16"], constant_kinds(line)


def test_a_layernorm_in_fp32_accumulation_compiles_to_the_pinned_layernorm_s_kernel_with_an_fp16_output():
    """relu -> LayerNormalization -> MatMul: Myelin fuses the LayerNorm into one generated kernel. Marked, it is
    the very kernel the pinned LayerNorm gets (same op sequence and tactic hash: scale and shift applied in FP32,
    then one Cast), writing FP16; all-FP16 gets another kernel (the Cast before the scale and shift)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from fp16bisect.model.plan_states import accumulating

    width = 512
    rng = np.random.default_rng(1)
    inits = {"s": np.ones(width, np.float32), "b": np.zeros(width, np.float32),
             "w": (rng.normal(size=(width, width)) / 16).astype(np.float32)}
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("LayerNormalization", ["r", "s", "b"], ["n"], name="ln", axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="out")]
    model = helper.make_model(helper.make_graph(
        nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, width])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    graph = Graph(model)
    kernels = {}
    for what, plan in (("marked", {accumulating("ln")}), ("pinned", {"ln"}), ("fp16", set())):
        _network, engine, messages = build_logged(mixed_model(graph, plan))
        assert engine is not None
        kernel, line = kernel_of(messages, "ln")
        assert kernel.tensors[-1][1] == "float16", (what, kernel)  # its one output: FP16, to the MatMul
        kernels[what] = (kernel_ops(kernel), re.search(r"TacticName: (\S+?)_0x([0-9a-f]+)", line).group(2))
    assert kernels["marked"] == kernels["pinned"] != kernels["fp16"], kernels
    assert " ".join(kernels["marked"][0]).endswith("Mul Mul Add Cast")  # scale and shift in FP32, then FP16


@pytest.mark.parametrize("name", ["layernorm", "global_pool", "softmax", "matmul"])
def test_the_accumulate_fp16_answer_builds_with_fp16_tensors_around_the_culprit_and_fp32_partials_inside(tmp_path,
                                                                                                        name):
    """Each model whose one FP16 failure is a sum (tests/accumulation_models.py): the answer of ``search
    --accumulate fp16`` (the culprit in FP32 accumulation) is written by ``apply --fp16-io`` (so that no FP32
    tensor enters or leaves the model), parsed and built by TensorRT-RTX. The Casts around the culprit become no
    work of their own: they are inside the kernels that compute the culprit. Every tensor of the model those
    kernels read or write is FP16 (storage), and every tensor they pass among themselves is FP32: the LayerNorm
    and the MatMul are one kernel each; the 16384- and 70000-long reductions are split by Myelin into kernels
    passing FP32 partial sums, never FP16 ones. Which accumulator the JIT-chosen code uses inside a kernel is not
    shown on a CPU."""
    import numpy as np
    import onnx

    import fp16bisect
    from accumulation_models import CASES
    from fp16bisect.artifacts.accumulation import CAST_PREFIX

    case = CASES[name]()
    model, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(case.model, model)
    np.savez(data, **case.inputs)
    found = fp16bisect.search(str(model), str(data), judge="emulate", space={"accumulate": "fp16"})
    assert [n.name for n in found.fp32_accumulate_nodes] == [case.culprit] and not found.fp32_nodes
    mixed = tmp_path / "mixed.onnx"
    fp16bisect.apply(str(model), found, str(mixed), fp16_io=True)
    _network, engine, messages = build_logged(onnx.load(mixed))
    assert engine is not None and len(engine) > 0
    mine = f"{CAST_PREFIX}{case.culprit}/"
    group = [layer for layer in printed_layers(messages)
             if any(n == case.culprit or n.startswith(mine) for n in layer.nodes)]
    assert {n for layer in group for n in layer.nodes if n.startswith(mine)}, group  # our Casts, in these kernels
    floats = {(t, kind) for layer in group for t, kind in layer.tensors if kind.startswith("float")}
    stored = {kind for t, kind in floats if not t.startswith("__my")}  # the model's tensors
    passed = {kind for t, kind in floats if t.startswith("__my")}  # between Myelin's kernels of the culprit
    assert stored == {"float16"}, group
    assert passed <= {"float32"}, group
    if name in ("layernorm", "matmul"):
        assert len([layer for layer in group if case.culprit in layer.nodes]) == 1, group
    if name == "softmax":  # the contrast: all-FP16, Myelin passes the normaliser's partial sums in FP16
        _network, _engine, messages = build_logged(mixed_model(Graph(case.model), [], fp16_io=True))
        partials = {kind for layer in printed_layers(messages) if case.culprit in layer.nodes
                    for t, kind in layer.tensors if t.startswith("__my") and kind.startswith("float")}
        assert "float16" in partials, partials
