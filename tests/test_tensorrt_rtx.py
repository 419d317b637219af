"""Proof from a real TensorRT parser (TensorRT-RTX, strongly typed) that a pin in the mixed model takes effect.

TensorRT-RTX parses ONNX and builds engines on a machine without a GPU (it
cannot run them). Its networks are always strongly typed: each layer's types
come from the ONNX graph, exactly as in TensorRT 11. For every sample model
and several plans: the layers TensorRT creates for a pinned node produce
FLOAT, those of every other candidate produce HALF, and the engine builds.
"""

import random

import pytest
from conftest import SAMPLES
from test_mixed import MODELS

from fp16bisect.model.graph import Graph
from fp16bisect.artifacts.mixed import mixed_model
from fp16bisect.artifacts.overrides import trtexec_layer_name

trt = pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX is a test extra: pip install '.[test]'")

LOGGER = trt.Logger(trt.Logger.ERROR)


def parse(model):
    builder = trt.Builder(LOGGER)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, LOGGER)
    ok = parser.parse(model.SerializeToString())
    errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
    assert ok and not errors and network.num_layers > 0, errors
    return builder, network, parser


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
        builder, network, _parser = parse(mixed_model(graph, plan))
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
    config = builder.create_builder_config()
    engine = builder.build_serialized_network(network, config)
    assert engine is not None and engine.nbytes > 0


def test_fp16_io_reaches_the_network_inputs_and_outputs():
    graph = Graph.load(SAMPLES / "transformer_block.onnx")
    _builder, network, _parser = parse(mixed_model(graph, ["ln1_square", "ln1_var"], fp16_io=True))
    assert network.get_input(0).dtype == trt.DataType.HALF
    assert network.get_output(0).dtype == trt.DataType.HALF


def test_a_dynamic_input_builds_with_a_profile_from_the_samples(tmp_path):
    """Real models (PP-OCRv4's recognizer) have dynamic batch and width: TensorRT needs a profile to build."""
    import warnings

    import numpy as np
    import onnx

    from fp16bisect.backends.tensorrt import pins as T
    from fp16bisect.backends.tensorrt import engine as E

    model = onnx.load(SAMPLES / "transformer_block.onnx")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "seq"
    graph = Graph(model)
    loaded = T.TensorRT(trt, "tensorrt_rtx", trt.__version__, weakly_typed=False)
    builder = E.EngineBuilder(loaded)
    onnx_bytes = mixed_model(graph, ["ln1_square", "ln1_var"]).SerializeToString()
    with pytest.raises(E.BuildError, match="no sample shape for input"):
        builder.build(onnx_bytes)
    shapes = E.sample_shapes([{"x": np.zeros((1, 8, 64))}, {"x": np.zeros((1, 16, 64))}])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        built = builder.build(onnx_bytes, shapes=shapes, opt_level=0)
    assert len(built.engine) > 0
