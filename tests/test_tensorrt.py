"""The TensorRT support (fp16bisect.backends.tensorrt: load, device, pin, engine, inspection) and backend.

Engines are parsed and built through Polygraphy's loaders (``NetworkFromOnnxBytes``/``NetworkFromOnnxPath``,
``CreateConfig``/``CreateConfigRTX``, ``EngineBytesFromNetwork``), deserialised by ``EngineFromBytes`` and run by
``TrtRunner``. Every strongly typed build here is TensorRT-RTX's, for real (a test extra): parsed and built, never
run (no GPU; an engine 'runs' as the emulation of its plan, whose types TensorRT-RTX honours:
tests/test_tensorrt_rtx.py). What cannot run here stands on the test double ``fake_tensorrt``: TensorRT 10.x's weak
typing beneath the same loaders (``make()``; every name it exposes checked against TensorRT-RTX's below), the engine
inspector's JSON, and ``TrtRunner`` (``runner``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, SAMPLES

import fake_tensorrt
from fp16bisect.model.samples import sample_shapes
from fp16bisect.model.weights import inline
from fp16bisect.backends.tensorrt import device as trt_device
from fp16bisect.backends.tensorrt import inspection as trt_inspection
from fp16bisect.backends.tensorrt import load as trt_load
from fp16bisect.backends.tensorrt import pin as trt_pin
from fp16bisect.backends.tensorrt import engine as E
from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph

TRANSFORMER = SAMPLES / "transformer_block.onnx"


@pytest.fixture
def trt(monkeypatch):
    """TensorRT 10.x's weak typing, the test double, beneath Polygraphy's loaders."""
    return fake_tensorrt.install(fake_tensorrt.make(), monkeypatch)


@pytest.fixture
def rtx(monkeypatch):
    """Real TensorRT-RTX (strongly typed, as TensorRT 11), where the test extra installed it."""
    module = pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX is a test extra: pip install '.[test]'")
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # load() takes tensorrt_rtx
    return module


@pytest.fixture
def gpu(monkeypatch):
    """cuda-python, the double: an NVIDIA L4 (compute capability 8.9) that TensorRT-RTX builds for."""
    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda("NVIDIA L4", (8, 9)))


@pytest.fixture
def configs(monkeypatch):
    """The keyword arguments of each configuration the adapter asks of Polygraphy (CreateConfig, CreateConfigRTX)."""
    import polygraphy.backend.tensorrt_rtx as rtx_loaders
    import polygraphy.backend.trt as loaders

    asked: list[dict] = []
    for module, name in ((loaders, "CreateConfig"), (rtx_loaders, "CreateConfigRTX")):
        monkeypatch.setattr(module, name, lambda real=getattr(module, name), **kw: asked.append(kw) or real(**kw))
    return asked


class Planned(bytes):
    """A strongly typed engine and the plan whose mixed-precision file it was built from (``plan``)."""


def network(path):
    _builder, net, _parser = E.parse(trt_load.load(), Path(path).read_bytes())
    return net


def by_name(net):
    return {layer.name: layer for layer in trt_pin.layers(net)}


def is_pinned(trt, layer) -> bool:
    floats = [i for i in range(layer.num_outputs) if layer.get_output(i).dtype in (trt.DataType.FLOAT, trt.DataType.HALF)]
    return vars(layer).get("precision") == trt.float32 and all(layer._output_types.get(i) == trt.float32 for i in floats)


def pinned_names(trt, net) -> set:
    return {layer.name for layer in trt_pin.layers(net) if is_pinned(trt, layer)}


def ran_in_fp32(graph: Graph, engine: bytes) -> frozenset:
    """The candidates an engine ran in FP32: a strongly typed engine, its plan (TensorRT honours the file's types);
    the fake's weakly typed one, every candidate whose engine layers all read and write FP32 only (what the engine
    did, whatever was asked)."""
    from fp16bisect.artifacts.exports import trtexec_layer_name

    if isinstance(engine, Planned):
        return engine.plan
    layers = trt_inspection.engine_layers({"Layers": json.loads(engine)["engine"]})
    found = set()
    for n in graph.candidates:
        mine = [layer for layer in layers if trtexec_layer_name(n) in layer.nodes]
        kinds = [kind for layer in mine for _name, kind in layer.tensors if kind in ("float32", "float16")]
        if kinds and all(kind == "float32" for kind in kinds):
            found.add(n.id)
    return frozenset(found)


# --------------------------------------------------------------------------- the API names


def _resolve(module, dotted: str):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _public(cls) -> set:
    names = set(vars(cls)) if isinstance(cls, type) else set()
    if isinstance(cls, type) and hasattr(cls, "__members__"):
        names |= set(cls.__members__)
    return {n for n in names if not n.startswith("_")}


def _missing_in(module, names) -> list:
    """The dotted names ``module`` lacks (a chain's prefixes are checked with it)."""
    missing = []
    for dotted in sorted(names):
        try:
            _resolve(module, dotted)
        except AttributeError:
            missing.append(dotted)
    return missing


def test_the_fake_exposes_only_names_tensorrt_rtx_has_but_those_only_10x_has(rtx):
    """The double invents no TensorRT API: each name it exposes is TensorRT-RTX's, or one of the few that only 10.x
    has (weak typing), each with the page that documents it."""
    fake = fake_tensorrt.make()
    exposed = {n for n in vars(fake) if not n.startswith("_")} | {"__version__"}
    for top in list(exposed):
        value = getattr(fake, top)
        exposed |= {f"{top}.{m}" for m in _public(value)}
        for member in _public(value):
            exposed |= {f"{top}.{member}.{m}" for m in _public(getattr(value, member))}
    assert _missing_in(rtx, exposed) == sorted(fake_tensorrt.ONLY_10)
    assert not _missing_in(fake, fake_tensorrt.ONLY_10)
    assert all(url.startswith("https://docs.nvidia.com/") for url in fake_tensorrt.ONLY_10.values())


def _trt_attribute_chains(path: Path) -> set:
    """Every ``trt.A.B...`` chain in a file (dunder methods like ``__init__`` aside)."""
    chains = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        parts = []
        current = node
        while isinstance(current, ast.Attribute):
            parts.append(current.attr)
            current = current.value
        if isinstance(current, ast.Name) and current.id == "trt":
            chain = [p for p in reversed(parts)]
            while chain and chain[-1].startswith("__") and chain[-1] != "__version__":
                chain.pop()
            if chain:
                chains.add(".".join(chain))
    return chains


def test_the_code_uses_only_names_tensorrt_rtx_has_but_those_only_10x_has(rtx):
    used = set()
    for path in sorted((ROOT / "fp16bisect" / "backends" / "tensorrt").glob("*.py")):
        used |= _trt_attribute_chains(path)
    assert used and set(_missing_in(rtx, used)) <= set(fake_tensorrt.ONLY_10), _missing_in(rtx, used)


def test_importing_the_module_does_not_import_tensorrt():
    code = (
        "import sys, fp16bisect.tensorrt, fp16bisect.backends.tensorrt.load, fp16bisect.backends.tensorrt.pin, "
        "fp16bisect.backends.tensorrt.inspection, fp16bisect.backends.tensorrt.backend, "
        "fp16bisect.backends.tensorrt.engine; "
        "assert not {'tensorrt', 'tensorrt_rtx', 'polygraphy'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_load_without_tensorrt_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    with pytest.raises(UsageError) as err:
        trt_load.load()
    assert str(err.value) == (
        "TensorRT is not installed: pip install 'fp16bisect[tensorrt]' on a machine with an NVIDIA GPU, "
        "or use --backend emulate"
    )


def test_load_without_polygraphy_says_how_to_install_it(trt, monkeypatch):
    """Every engine is built and run through Polygraphy: without it, TensorRT alone is no use (apply_overrides,
    verify_pins and the kernel plan load TensorRT this way too)."""
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, real=importlib.util.find_spec:
                        None if name == "polygraphy" else real(name, *a))
    with pytest.raises(UsageError) as err:
        trt_pin.apply_overrides(None, ["ln1_var"])
    assert str(err.value) == ("Polygraphy is not installed, and fp16bisect builds and runs TensorRT engines through "
                              "it: pip install 'fp16bisect[tensorrt]'")


@pytest.mark.parametrize("first", ["", "import polygraphy.json, polygraphy.backend.trt; "])
def test_load_points_polygraphy_at_tensorrt_rtx_whether_or_not_polygraphy_came_first(first):
    """load() sets POLYGRAPHY_USE_TENSORRT_RTX=1 (the one place fp16bisect does) before Polygraphy is imported; when
    Polygraphy came first (reading Polygraphy JSON samples imports it), its modules are pointed at TensorRT-RTX
    anew. Either way a sample model builds through the adapter, in a fresh interpreter."""
    import os

    pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX is a test extra: pip install '.[test]'")
    code = (f"import os, pathlib; {first}from fp16bisect.backends.tensorrt import engine, load; loaded = load.load(); "
            "import polygraphy.config, polygraphy.datatype.tensorrt as types; "
            "assert os.environ['POLYGRAPHY_USE_TENSORRT_RTX'] == '1' and polygraphy.config.USE_TENSORRT_RTX; "
            "assert types.trt.__name__ == 'tensorrt_rtx', types.trt.__name__; "
            f"assert engine.build(loaded, pathlib.Path({str(TRANSFORMER)!r}), engine.Settings(opt_level=0)).engine")
    env = {k: v for k, v in os.environ.items() if k != "POLYGRAPHY_USE_TENSORRT_RTX"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_load_reports_flavour_and_typing(trt):
    loaded = trt_load.load()
    assert (loaded.flavour, loaded.version, loaded.weakly_typed) == ("tensorrt", trt.__version__, True)


def fake_cuda(monkeypatch, answer, old_layout=False):
    """cuda-python whose ``cudaGetDeviceCount`` returns ``answer`` (an (error, count) pair) or raises it; in the
    layout of cuda-python >= 12.6 (``cuda.bindings.runtime``) or before (``cuda.cudart``)."""
    import types

    cudart = types.ModuleType("cudart")
    cudart.cudaError_t = types.SimpleNamespace(cudaSuccess=0, cudaErrorNoDevice=100)

    def count():
        if isinstance(answer, Exception):
            raise answer
        return answer

    cudart.cudaGetDeviceCount = count
    cuda = types.ModuleType("cuda")
    if old_layout:
        cuda.cudart = cudart
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # no cuda.bindings: the import fails
    else:
        cuda.bindings = types.ModuleType("cuda.bindings")
        cuda.bindings.runtime = cudart
        monkeypatch.setitem(sys.modules, "cuda.bindings", cuda.bindings)
        monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", cudart)
    monkeypatch.setitem(sys.modules, "cuda", cuda)


@pytest.mark.parametrize("answer, old_layout, count", [
    ((0, 2), False, 2),  # cudaSuccess, two GPUs
    ((0, 3), True, 3),  # cuda-python < 12.6: cuda.cudart
    ((0, 0), False, 0),
    ((100, 0), False, 0),  # cudaErrorNoDevice (no driver, no device)
    (RuntimeError("CUDA driver version is insufficient"), False, 0),
])
def test_gpu_count_is_what_cuda_answers_and_never_raises(monkeypatch, answer, old_layout, count):
    fake_cuda(monkeypatch, answer, old_layout)
    assert trt_device.gpu_count() == count


def test_without_cuda_python_there_is_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda", None)  # cuda-python not installed: both imports fail
    assert trt_device.gpu_count() == 0


def test_metadata_names():
    assert trt_pin.metadata_nodes("[ONNX Layer: ln1_var]") == ("ln1_var",)
    assert trt_pin.metadata_nodes("[ONNX Layer: inner | Local Function: MyFn]") == ("inner",)
    assert trt_pin.metadata_nodes("[ONNX Layer: node_of_y]") == ("node_of_y",)
    assert trt_pin.metadata_nodes("") == ()


# --------------------------------------------------------------------------- apply_overrides / pin


def test_apply_pins_exactly_the_listed_nodes_and_sets_the_config(trt):
    net = network(TRANSFORMER)
    config = trt.Builder(None).create_builder_config()
    applied = trt_pin.apply_overrides(net, ["ln1_square", "ln1_var"], config)
    assert [(p.layer, p.node, p.transparent) for p in applied.layers] == [
        ("ln1_square", "ln1_square", False),
        ("ln1_var", "ln1_var", False),
    ]
    assert pinned_names(trt, net) == {"ln1_square", "ln1_var"}
    assert applied.missing == []
    assert config._flags == {trt.BuilderFlag.FP16, trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS}


def test_layers_are_found_through_metadata_not_names(trt):
    net = network(TRANSFORMER)
    # the initializer 'attn_scale' took the name: the Mul node's layer is renamed, its metadata is not
    layers = by_name(net)
    assert layers["attn_scale"].type == trt.LayerType.CONSTANT
    applied = trt_pin.apply_overrides(net, ["attn_scale"])
    direct = [p.layer for p in applied.layers if not p.transparent]
    assert len(direct) == 1 and direct[0] != "attn_scale"
    assert layers[direct[0]].metadata == "[ONNX Layer: attn_scale]"
    # its scale constant and broadcast feed only the pinned layer: kept in FP32 too, so not rounded
    transparent = {p.layer for p in applied.layers if p.transparent}
    assert transparent == {"attn_scale", layers[direct[0]].get_input(1).name.removesuffix("_output")}


def test_every_layer_of_a_multi_layer_node_is_pinned_from_the_json(trt, tmp_path):
    net = network(SAMPLES / "cnn_batchnorm.onnx")  # unnamed nodes; the Gemm imports as two layers
    data = {"fp32_nodes": [{"name": "logits", "op_type": "Gemm", "outputs": ["logits"]},
                           {"name": "bn1_out", "op_type": "BatchNormalization", "outputs": ["bn1_out"]}]}
    applied = trt_pin.apply_overrides(net, data)
    direct = {p.layer for p in applied.layers if not p.transparent}
    assert direct == {"node_of_logits", "node_of_logits_1", "node_of_bn1_out"}
    assert direct <= pinned_names(trt, net)
    assert {p.node for p in applied.layers if not p.transparent} == {"logits", "bn1_out"}


def test_override_file_path_is_read(trt, tmp_path):
    graph = Graph.load(TRANSFORMER)
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.artifacts.override_json import node_entry
    from fp16bisect.artifacts.overrides import SCHEMA

    data = {"schema": SCHEMA, "model": {"path": str(TRANSFORMER), "sha256": graph.sha256}, "backend": {},
            "tolerance": {}, "search": {}, "metrics": {}, "exports": {},
            "fp32_nodes": [node_entry(graph.by_id["ln1_var"])]}
    path = tmp_path / "overrides.json"
    write_json(path, data)
    net = network(TRANSFORMER)
    assert [p.layer for p in trt_pin.apply_overrides(net, path).layers] == ["ln1_var"]


def test_nodes_sharing_a_name_are_told_apart_by_their_outputs(trt):
    net = network(SAMPLES / "two_branches.onnx")  # two nodes named 'reduce', two named 'div'
    graph = Graph.load(SAMPLES / "two_branches.onnx")
    node = next(n for n in graph.nodes if n.name == "reduce" and n.outputs == ("b_sum",))
    from fp16bisect.artifacts.override_json import node_entry

    applied = trt_pin.apply_overrides(net, {"fp32_nodes": [node_entry(node)]})  # its id is 'b_sum'
    direct = [p.layer for p in applied.layers if not p.transparent]
    assert len(direct) == 1
    assert by_name(net)[direct[0]].get_output(0).name == "b_sum"


def test_transparent_layers_between_pinned_layers_are_pinned(trt):
    net = network(TRANSFORMER)
    # q_proj_bias -> Reshape q_split -> Transpose q_heads -> qk_matmul
    applied = trt_pin.apply_overrides(net, ["q_proj_bias", "qk_matmul"])
    transparent = {p.layer for p in applied.layers if p.transparent}
    assert {"q_split", "q_heads"} <= transparent
    assert {"q_split", "q_heads", "q_proj_bias", "qk_matmul"} <= pinned_names(trt, net)
    assert "heads_shape" not in pinned_names(trt, net)  # an int64 shape constant: never given float types
    assert "k_split" not in pinned_names(trt, net)  # reads k from an FP16 layer


def test_a_transparent_layer_between_a_pinned_and_an_fp16_layer_is_not_pinned(trt):
    net = network(TRANSFORMER)
    applied = trt_pin.apply_overrides(net, ["q_proj_bias"])  # qk_matmul stays FP16
    assert not {"q_split", "q_heads"} & {p.layer for p in applied.layers}
    assert not {"q_split", "q_heads"} & pinned_names(trt, net)
    # the softmax's helper shuffle feeds an FP16 matmul: not pinned either
    applied = trt_pin.apply_overrides(network(TRANSFORMER), ["attn_softmax"])
    assert [p.layer for p in applied.layers] == ["attn_softmax"]


def test_applied_names_the_layers_pinned(trt):
    net = network(TRANSFORMER)
    names = [p.layer for p in trt_pin.apply_overrides(net, ["q_proj_bias", "qk_matmul"]).layers]
    assert names[:2] == ["q_proj_bias", "qk_matmul"]
    # and the transparent ones: the bias constant and its broadcast, the Reshape and the Transpose
    assert set(names[2:]) == {"q_proj.bias", by_name(net)["q_proj_bias"].get_input(1).name[:-7], "q_split", "q_heads"}


def test_unknown_names_are_reported_not_ignored(trt):
    net = network(TRANSFORMER)
    with pytest.warns(trt_pin.MissingNodesWarning, match="no_such_node"):
        applied = trt_pin.apply_overrides(net, ["ln1_var", "no_such_node"])
    assert applied.missing == ["no_such_node"]
    assert [p.layer for p in applied.layers] == ["ln1_var"]
    with pytest.raises(UsageError, match="no_such_node"):
        trt_pin.apply_overrides(network(TRANSFORMER), ["ln1_var", "no_such_node"], strict=True)


def test_bad_override_data_is_a_usage_error(trt):
    with pytest.raises(UsageError, match="fp32_nodes"):
        trt_pin.apply_overrides(network(TRANSFORMER), {"schema": "x"})


def test_a_strongly_typed_tensorrt_says_to_write_a_mixed_precision_model(rtx):
    net = network(TRANSFORMER)
    with pytest.raises(UsageError, match="fp16bisect apply") as err:
        trt_pin.apply_overrides(net, ["ln1_var"])
    assert f"tensorrt_rtx {rtx.__version__} is strongly typed" in str(err.value)


def test_a_strongly_typed_network_on_tensorrt_10_says_so(trt):
    builder = trt.Builder(None)
    net = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    with pytest.raises(UsageError, match="STRONGLY_TYPED.*fp16bisect apply"):
        trt_pin.apply_overrides(net, ["ln1_var"])


def test_verify_pins_on_a_users_engine(trt, tmp_path):
    """A user's own TensorRT 10 pipeline: apply_overrides, build, then verify_pins on the engine."""
    from fp16bisect.tensorrt import verify_pins

    trt._myelin = [["ln2_square", "ln2_var", "ln2_add_eps"]]
    builder = trt.Builder(None)
    net = network(TRANSFORMER)
    config = builder.create_builder_config()
    trt_pin.apply_overrides(net, ["ln1_square", "ln1_var", "ln2_var"], config)
    assert config.profiling_verbosity == trt.ProfilingVerbosity.DETAILED  # set, so the check can read types
    engine = trt.Runtime(None).deserialize_cuda_engine(builder.build_serialized_network(net, config))
    check = verify_pins(engine, ["ln1_square", "ln1_var", "ln2_var"])
    assert not check.ok and check.verified == ["ln1_square", "ln1_var"]
    assert check.ignored == [trt_inspection.IgnoredPin("ln2_var", "{ForeignNode[ln2_square...ln2_add_eps]}")]
    assert str(check) == ("TensorRT ignored the FP32 pin on ln2_var (fused into {ForeignNode[ln2_square...ln2_add_eps]}); "
                          "use the default strongly typed build")
    # from the serialized engine (deserialized for the check: on real TensorRT that needs the GPU)
    assert verify_pins(builder.build_serialized_network(net, config), ["ln1_square", "ln1_var"]).ok
    unpinned = builder.build_serialized_network(network(TRANSFORMER), config)  # FP16 flag, nothing pinned
    assert verify_pins(unpinned, ["ln1_var"]).ignored == [trt_inspection.IgnoredPin("ln1_var", "ln1_var")]
    # the same from the layer information JSON, as trtexec --exportLayerInfo writes it
    info = tmp_path / "layers.json"
    info.write_text(engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON))
    assert verify_pins(info, ["ln1_square", "ln1_var"]).ok
    assert verify_pins(str(info), {"fp32_nodes": [{"name": "ln2_var", "outputs": ["ln2_var_out"]}]}).ignored
    # an engine built without detailed layer information cannot be checked: said, not guessed
    plain = builder.create_builder_config()
    bare = trt.Runtime(None).deserialize_cuda_engine(builder.build_serialized_network(network(TRANSFORMER), plain))
    with pytest.raises(UsageError, match="ProfilingVerbosity.DETAILED"):
        verify_pins(bare, ["ln1_var"])


def test_engine_layer_information_parsing():
    assert trt_inspection.metadata_nodes("[ONNX Layer: a]\x1f[ONNX Layer: b | Local Function: f]") == ("a", "b")
    assert trt_inspection.metadata_nodes("[ONNX Layer: a][ONNX Layer: b]") == ("a", "b")
    assert trt_inspection.metadata_nodes("") == ()
    kinds = [trt_inspection.tensor_kind(t) for t in ("Row major linear FP32",
                                                      "Channel major FP16 format where channel % 8 == 0",
                                                      "Float", "Half", "Row major linear Int32", "BFloat16")]
    assert kinds == ["float32", "float16", "float32", "float16", "Row major linear Int32", "bfloat16"]
    # TensorRT 11 writes "Datatype" beside "Format"
    layers = trt_inspection.engine_layers({"Layers": [{"Name": "l", "Inputs": [{"Name": "x", "Datatype": "Half"}],
                                                       "Outputs": [], "Metadata": "[ONNX Layer: n]"}]})
    assert layers == [trt_inspection.EngineLayer("l", ("n",), (("x", "float16"),))]


# --------------------------------------------------------------------------- building


def test_build_pins_sets_flags_and_returns_the_timing_cache(trt, capsys):
    settings = E.Settings(opt_level=1, strongly_typed=False)
    built = E.build(trt_load.load(), TRANSFORMER.read_bytes(), settings, fp32=[trt_pin.NodeRef.of("ln1_var")],
                    timing_cache=b"cache")
    info = json.loads(built.engine)
    assert info["fp16"] and info["obey"] and info["opt_level"] == 1
    assert info["tf32"] and info["profiling_verbosity"] == "DETAILED"  # TensorRT's default TF32, kept
    assert [n for n, layer in info["layers"].items() if layer["precision"] == "FLOAT"] == ["ln1_var"]
    assert info["layers"]["ln1_var"]["output_types"] == {"0": "FLOAT"}
    assert built.timing_cache == b"cache+"
    assert capsys.readouterr() == ("", "")  # Polygraphy's own lines are kept, not printed


@pytest.mark.filterwarnings("ignore:Context managers for TensorRT types are deprecated")  # TensorRT-RTX's, not 10.x's
def test_a_strongly_typed_build_on_tensorrt_10_asks_for_a_strongly_typed_network_and_no_precision_flags(
        rtx, configs, monkeypatch, capsys):
    """TensorRT 10.x's default route: the network created with NetworkDefinitionCreationFlag.STRONGLY_TYPED (parsed
    from the file when given a path), the config without FP16 or obeyed precisions, with the timing cache. What the
    adapter asks of Polygraphy for TensorRT 10.x is here built by TensorRT-RTX's real builder."""
    import polygraphy.backend.trt as loaders

    asked = []
    monkeypatch.setattr(loaders, "NetworkFromOnnxPath", lambda path, real=loaders.NetworkFromOnnxPath, **kw:
                        asked.append((path, kw)) or real(path, **kw))
    as_10 = replace(trt_load.load(), flavour="tensorrt", version="10.16.1.11", weakly_typed=True)
    built = E.build(as_10, TRANSFORMER, E.Settings(opt_level=0))
    assert asked == [(str(TRANSFORMER), {"strongly_typed": True})] and len(built.engine) > 100_000
    assert (configs[0]["fp16"], configs[0]["bf16"], configs[0]["precision_constraints"]) == (False, False, None)
    assert configs[0]["tf32"] and configs[0]["builder_optimization_level"] == 0 and configs[0]["load_timing_cache"]
    assert E.build(trt_load.load(), TRANSFORMER, E.Settings(opt_level=0)).timing_cache is None  # RTX: no cache
    assert "load_timing_cache" not in configs[1] and "fp16" not in configs[1]  # CreateConfigRTX
    assert capsys.readouterr() == ("", "")


def test_a_parse_failure_carries_tensorrt_rtx_s_message(rtx):
    with pytest.raises(E.ParseError, match="MODEL_DESERIALIZE_FAILED") as err:
        E.build(trt_load.load(), b"not a model", E.Settings())
    assert "Could not parse ONNX correctly" not in str(err.value)  # Polygraphy's closing line, when TensorRT said more


def test_a_build_failure_carries_tensorrt_s_message(trt):
    trt._fail_build = "Error Code 4: Internal Error (no implementation for ln1_var in FP32)"
    with pytest.raises(E.BuildError) as err:
        E.build(trt_load.load(), TRANSFORMER.read_bytes(), E.Settings(strongly_typed=False))
    assert str(err.value) == ("TensorRT could not build the engine: Error Code 4: Internal Error (no implementation "
                              "for ln1_var in FP32)")


def test_an_engine_runs_through_polygraphys_runner(trt, monkeypatch):
    """Polygraphy's TrtRunner (its stand-in here) runs what EngineFromBytes deserialised: inputs in the engine's
    types, outputs copied (the runner reuses its buffers), per-layer times from TensorRT's profiler."""
    import polygraphy.backend.trt

    buffer = np.zeros((1, 16, 64), np.float32)
    seen = []
    monkeypatch.setattr(polygraphy.backend.trt, "TrtRunner", fake_tensorrt.runner(
        trt, lambda engine, feed: seen.append(feed) or {"y": buffer}))
    built = E.build(trt_load.load(), TRANSFORMER.read_bytes(), E.Settings(strongly_typed=False))
    with E.Engine(trt_load.load(), built.engine) as engine:
        outputs = engine.infer({"x": np.ones((1, 16, 64), np.float64)})
        assert seen[0]["x"].dtype == np.float32 and outputs["y"] is not buffer
        trt._layer_ms = lambda layer: 0.5 if layer["Name"] == "ln1_var" else 0.25
        times = engine.layer_times({"x": np.ones((1, 16, 64), np.float32)}, runs=3)
    assert times["ln1_var"] == pytest.approx(0.5) and times["ln1_square"] == pytest.approx(0.25)
    assert len(seen) == 1 + 1 + 3  # one run, one warm-up, three profiled


# --------------------------------------------------------------------------- the backend


def planned(build):
    """The backend's ``_build``, each strongly typed engine tagged with its plan (``Planned``)."""

    def tagged(self, plan):
        engine = build(self, plan)
        if self.typing == "weak":
            return engine
        engine = Planned(engine)
        engine.plan = frozenset(plan)
        return engine

    return tagged


@pytest.fixture
def backend_factory(monkeypatch, tmp_path, gpu):
    from fp16bisect.backends.tensorrt import backend as backend_module

    monkeypatch.setattr(backend_module.TensorRTBackend, "_build", planned(backend_module.TensorRTBackend._build))
    runs = []

    def execute(self, key, engine, inputs):
        """No GPU: 'run' the engine; the output says how many candidate nodes ran in FP32."""
        pinned = len(ran_in_fp32(self.graph, engine))
        runs.append((key, float(inputs["x"].ravel()[0])))
        return {"y": np.full((1, 16, 64), pinned + float(inputs["x"].ravel()[0]), dtype=np.float32)}

    monkeypatch.setattr(backend_module.TensorRTBackend, "_execute", execute)

    def make(path=TRANSFORMER, **kwargs):
        graph = Graph.load(path)
        kwargs.setdefault("timing_cache", tmp_path / "timing.cache")
        return backend_module.TensorRTBackend(graph, **kwargs), runs

    return make


def test_backend_builds_each_plans_mixed_precision_file_on_tensorrt_rtx_once(rtx, backend_factory, configs,
                                                                            monkeypatch, tmp_path, capsys):
    """Real TensorRT-RTX builds each plan's file once, whatever the samples, for the GPU CUDA reports (a double of
    cuda-python says an L4, compute capability 8.9) at the optimisation level asked; running needs a GPU."""
    import fp16bisect.artifacts.mixed as mixed

    written = []
    monkeypatch.setattr(mixed, "mixed_model", lambda graph, fp32, real=mixed.mixed_model: written.append(fp32) or
                        real(graph, fp32))
    backend, runs = backend_factory(opt_level=0)
    assert backend.name == "tensorrt" and backend.versions()["tensorrt_rtx"] == rtx.__version__
    plan = frozenset({"ln1_square", "ln1_var"})
    assert backend.run(plan, {"x": np.zeros((1, 16, 64), dtype=np.float32)})["y"].ravel()[0] == 2.0
    backend.run(set(plan), {"x": np.ones((1, 16, 64), dtype=np.float32)})  # same plan, other sample: no new build
    assert backend.builds == 1 and len(runs) == 2 and len(backend.engines[(plan, 0)]) > 100_000
    backend.run(frozenset(), {"x": np.zeros((1, 16, 64), dtype=np.float32)})
    assert backend.builds == 2 and written == [["ln1_square", "ln1_var"], []]
    assert [(c["builder_optimization_level"], c["compute_capabilities"]) for c in configs] == [(0, [(8, 9)])] * 2
    assert not (tmp_path / "timing.cache").exists()  # TensorRT-RTX has no timing cache
    with pytest.raises(UsageError, match="plan names node.s. that are not candidates"):
        backend.run(frozenset({"no_such_node"}), {"x": np.zeros((1, 16, 64), dtype=np.float32)})
    assert capsys.readouterr() == ("", "")


def test_weak_typing_pins_layer_precisions_and_inspects_every_engine(trt, backend_factory, tmp_path):
    backend, _runs = backend_factory(typing="weak", opt_level=2)
    plan = frozenset({"ln1_square", "ln1_var"})
    assert backend.run(plan, {"x": np.zeros((1, 16, 64), dtype=np.float32)})["y"].ravel()[0] == 2.0
    built = trt._builds[-1]
    assert built["fp16"] and built["obey"] and built["profiling_verbosity"] == "DETAILED" and built["opt_level"] == 2
    assert {n for n, layer in built["layers"].items() if layer["precision"] == "FLOAT"} == plan
    assert "fp16bisect/cast_fp32/ln1_centered" not in built["layers"]  # the original model
    assert trt._inspected == 1
    backend.run(frozenset(), {"x": np.zeros((1, 16, 64), dtype=np.float32)})
    assert (tmp_path / "timing.cache").read_bytes() == b"++"  # saved after every build


def test_a_fused_pinned_layer_makes_the_plan_unreliable_and_is_warned_once(trt, backend_factory):
    from fp16bisect.backends.tensorrt.backend import IgnoredPinWarning, PinsIgnored
    from fp16bisect.errors import BuildFailed

    trt._myelin = [["ln1_square", "ln1_var", "ln1_add_eps"]]  # Myelin fuses the variance with its epsilon
    backend, _runs = backend_factory(typing="weak")
    x = {"x": np.zeros((1, 16, 64), dtype=np.float32)}
    with pytest.warns(IgnoredPinWarning) as warned, pytest.raises(PinsIgnored) as err:
        backend.run(frozenset({"ln1_square", "ln1_var"}), x)
    layer = "{ForeignNode[ln1_square...ln1_add_eps]}"
    assert err.value.check.ignored == [trt_inspection.IgnoredPin("ln1_square", layer),
                                       trt_inspection.IgnoredPin("ln1_var", layer)]
    assert isinstance(err.value, BuildFailed)  # the oracle records it like a failed build
    assert str(err.value).endswith(
        f"TensorRT ignored the FP32 pin on ln1_square (fused into {layer}); TensorRT ignored the FP32 pin on "
        f"ln1_var (fused into {layer}); use the default strongly typed build")
    assert [str(w.message) for w in warned] == [
        f"TensorRT ignored the FP32 pin on ln1_square (fused into {layer}); use the default strongly typed build",
        f"TensorRT ignored the FP32 pin on ln1_var (fused into {layer}); use the default strongly typed build"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the same pins ignored again warn no more
        with pytest.raises(PinsIgnored):
            backend.run(frozenset({"ln1_square", "ln1_var", "ln1_mean"}), x)
    # the whole fused group pinned: the engine runs it in FP32, the plan is evidence
    whole = frozenset({"ln1_square", "ln1_var", "ln1_add_eps"})
    assert backend.run(whole, x)["y"].ravel()[0] == 3.0


def test_backend_reuses_a_saved_timing_cache(trt, backend_factory, tmp_path):
    (tmp_path / "timing.cache").write_bytes(b"old")
    backend, _runs = backend_factory(typing="weak")
    backend.run(frozenset(), {"x": np.zeros((1, 16, 64), dtype=np.float32)})
    assert (tmp_path / "timing.cache").read_bytes() == b"old+"


def test_a_timing_cache_tensorrt_refuses_is_replaced_by_the_next_build(trt, backend_factory, tmp_path):
    (tmp_path / "timing.cache").write_bytes(b"other GPU's")
    backend, _runs = backend_factory(typing="weak")
    x = {"x": np.zeros((1, 16, 64), dtype=np.float32)}
    backend.run(frozenset(), x)  # built without a cache: nothing to save
    assert (tmp_path / "timing.cache").read_bytes() == b"other GPU's"
    backend.run(frozenset({"ln1_var"}), x)
    assert (tmp_path / "timing.cache").read_bytes() == b"+"


def test_backend_keeps_a_bounded_number_of_engines(rtx, backend_factory):
    backend, _runs = backend_factory(opt_level=0)
    backend.max_engines = 2
    x = {"x": np.zeros((1, 16, 64), dtype=np.float32)}
    for plan in (["ln1_var"], ["ln2_var"], ["ln1_square"]):
        backend.run(frozenset(plan), x)
    assert len(backend.engines) == 2


def test_backend_pins_every_layer_of_unnamed_and_duplicate_named_nodes(trt, backend_factory):
    backend, _runs = backend_factory(SAMPLES / "cnn_batchnorm.onnx", typing="weak")
    backend._execute = lambda key, engine, inputs: {}
    backend.run(frozenset({"logits"}), {"image": np.zeros((1, 3, 8, 8), dtype=np.float32)})
    pinned = {n for n, layer in trt._builds[-1]["layers"].items() if layer["precision"] == "FLOAT"}
    assert {"node_of_logits", "node_of_logits_1"} <= pinned
    backend, _runs = backend_factory(SAMPLES / "two_branches.onnx", typing="weak")
    backend._execute = lambda key, engine, inputs: {}
    graph = backend.graph
    b_sum = next(n.id for n in graph.nodes if n.outputs == ("b_sum",))
    backend.run(frozenset({b_sum}), {"features": np.zeros(1, np.float32), "scores": np.zeros(1, np.float32)})
    layers = trt._builds[-1]["layers"]
    assert [n for n, layer in layers.items() if layer["precision"] == "FLOAT"] == [
        n for n, layer in layers.items() if layer["metadata"] == f"[ONNX Layer: {b_sum}]"
    ]


def test_backend_build_failure_names_the_plan_and_carries_the_message(trt, backend_factory):
    from fp16bisect.backends.tensorrt.backend import BuildFailed

    backend, _runs = backend_factory(typing="weak")
    trt._fail_build = "Error Code 10: Could not find any implementation for node ln1_var"
    with pytest.raises(BuildFailed) as err:
        backend.run(frozenset({"ln1_var"}), {"x": np.zeros((1, 16, 64), dtype=np.float32)})
    assert err.value.plan == frozenset({"ln1_var"})
    assert "Could not find any implementation for node ln1_var" in str(err.value)
    assert "ln1_var" in err.value.message


def test_noise_builds_the_all_fp16_plan_twice(rtx, backend_factory):
    backend, _runs = backend_factory(opt_level=0)
    x = {"x": np.zeros((1, 16, 64), dtype=np.float32)}
    backend.run(frozenset(), x)
    values = iter([np.float32(1.0), np.float32(1.25)])
    backend._execute = lambda key, engine, inputs: {"y": np.full(3, next(values))}
    first, second = backend.noise(x)
    assert first["y"][0] == 1.0 and second["y"][0] == 1.25
    assert backend.builds == 3  # two fresh builds despite the memo


def test_dynamic_inputs_get_one_profile_from_the_samples_shapes(rtx, backend_factory, configs, tmp_path):
    model = onnx.load(TRANSFORMER)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "seq"
    dynamic = tmp_path / "dynamic.onnx"
    onnx.save(model, dynamic)
    shapes = sample_shapes([{"x": np.zeros((1, 8, 64))}, {"x": np.zeros((1, 16, 64))}])
    assert shapes == {"x": ((1, 8, 64), (1, 8, 64), (1, 16, 64))}
    backend, _runs = backend_factory(dynamic, input_shapes=shapes, opt_level=0)
    backend.run(frozenset(), {"x": np.zeros((1, 8, 64), dtype=np.float32)})  # TensorRT-RTX builds it
    [profile] = configs[-1]["profiles"]
    assert {name: tuple(map(tuple, shapes)) for name, shapes in profile.items()} == shapes
    from fp16bisect.errors import BuildFailed

    backend, _runs = backend_factory(dynamic)  # no shapes: a failed build that says why
    with pytest.raises(BuildFailed, match="no sample shape for input"):
        backend.run(frozenset({"ln1_var"}), {"x": np.zeros((1, 8, 64), dtype=np.float32)})


def test_backend_without_a_gpu_is_a_usage_error(trt, monkeypatch, tmp_path):
    from fp16bisect.backends.tensorrt.backend import TensorRTBackend

    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda(devices=0))
    with pytest.raises(UsageError, match="no GPU.*--backend emulate"):
        TensorRTBackend(Graph.load(TRANSFORMER), timing_cache=tmp_path / "c")


# --------------------------------------------------------------------------- real TensorRT-RTX (strongly typed)


def test_real_tensorrt_rtx_builds_a_mixed_model_and_refuses_layer_precisions(rtx):
    from fp16bisect.artifacts.mixed import mixed_model

    loaded = trt_load.load()
    assert loaded.flavour == "tensorrt_rtx" and not loaded.weakly_typed
    import polygraphy.config

    assert polygraphy.config.USE_TENSORRT_RTX  # Polygraphy pointed at TensorRT-RTX by load()
    graph = Graph.load(TRANSFORMER)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning from the timing-cache calls Polygraphy makes
        built = E.build(loaded, inline(mixed_model(graph, ["ln1_square"])).SerializeToString(), E.Settings(opt_level=0))
    assert len(built.engine) > 0 and built.timing_cache is None
    _b, net, _p = E.parse(loaded, TRANSFORMER.read_bytes())
    refs = [trt_pin.NodeRef.of(n.name, n.outputs) for n in graph.nodes]
    found, missing = trt_pin.resolve(net, refs)
    assert set(found) == set(refs) and not missing  # every node's layers, found through their metadata
    with pytest.raises(UsageError, match="strongly typed.*fp16bisect apply"):
        trt_pin.apply_overrides(net, ["ln1_var"])
    with pytest.raises(UsageError, match="strongly typed.*fp16bisect apply"):
        E.build(loaded, TRANSFORMER.read_bytes(), E.Settings(), fp32=[trt_pin.NodeRef.of("ln1_var")])
    broken = graph.runnable_copy()
    broken.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(E.ParseError, match="NoSuchOp"):
        E.build(loaded, inline(broken).SerializeToString(), E.Settings())


def test_real_tensorrt_rtx_cannot_load_an_engine_without_a_gpu_and_says_why(rtx):
    """Polygraphy's real EngineFromBytes and TrtRunner: on this CPU the engine builds, and loading it fails with
    TensorRT-RTX's own words (a RunError, not a crash or a line on stdout)."""
    loaded = trt_load.load()
    built = E.build(loaded, TRANSFORMER, E.Settings(opt_level=0))
    with pytest.raises(E.RunError, match="TensorRT could not load the engine: .*\\S"):
        with E.Engine(loaded, built.engine):
            pass


# --------------------------------------------------------------------------- the search on the tensorrt backend


@pytest.fixture
def engines_run_as_built(monkeypatch, gpu):
    """No GPU: an engine 'runs' by emulating exactly the nodes it ran in FP32 (``ran_in_fp32``: a strongly typed
    engine's plan; a weakly typed one's, read back from its layer information), so the search sees what the engine
    did, not what was asked. ``builds``: how many engines were built."""
    from fp16bisect.backends.tensorrt import backend as backend_module
    from fp16bisect.backends.emulate import EmulateBackend

    emulators = {}
    noisy = {"on": False, "count": 0, "builds": 0}
    build = planned(backend_module.TensorRTBackend._build)

    def counted(self, plan):
        noisy["builds"] += 1
        return build(self, plan)

    def execute(self, key, engine, inputs):
        emulator = emulators.setdefault(id(self.graph), EmulateBackend(self.graph))
        out = emulator.run(ran_in_fp32(self.graph, engine), inputs)
        if noisy["on"] and str(key).startswith("noise"):
            noisy["count"] += 1
            out = {k: v + noisy["count"] for k, v in out.items()}  # the second build computes differently
        return out

    monkeypatch.setattr(backend_module.TensorRTBackend, "_build", counted)
    monkeypatch.setattr(backend_module.TensorRTBackend, "_execute", execute)
    return noisy


def test_search_on_the_tensorrt_backend_builds_each_plans_file_and_finds_the_culprits(
        rtx, engines_run_as_built, configs, tmp_path, capsys):
    from fp16bisect.cli.main import main

    out = tmp_path / "o.json"
    code = main(["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"),
                 "--backend", "tensorrt", "--opt-level", "1", "-o", str(out), "-q"])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert data["backend"]["name"] == "tensorrt" and data["backend"]["build_noise"] == {"y": 0.0}
    assert data["search"]["minimal"] and data["search"]["verified"]
    # every plan's mixed-precision model, strongly typed, at the optimisation level asked
    assert data["backend"]["typing"] == "strong" and data["search"]["ignored_pins"] == []
    assert len(configs) == engines_run_as_built["builds"] > 0
    assert all(c["builder_optimization_level"] == 1 for c in configs)
    assert list(data["exports"])[0] == "strongly_typed"  # the route TensorRT must honour, first


def test_with_a_prior_the_noise_is_measured_on_its_set_and_its_first_engine_is_kept(
        rtx, engines_run_as_built, tmp_path, capsys):
    """The emulator's set S is the first plan the search builds after all-FP16: building it twice for the noise
    keeps the first engine as S's own. An agreeing prior then costs k + 2 evaluations (all-FP16 on the judge,
    S, its k removals) and, since builds vary, one fresh build of the answer (the recheck): k + 4 builds."""
    from fp16bisect.cli.main import main

    out = tmp_path / "o.json"
    code = main(["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"),
                 "--backend", "tensorrt", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    data = json.loads(out.read_text())
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert data["prior"]["agreed"]
    assert [s["phase"] for s in data["search"]["trace"]] == ["precondition", "start", "minimality", "minimality",
                                                             "recheck"]
    assert "building the engine of the prior's set (2 node(s) in FP32) twice" in err
    assert engines_run_as_built["builds"] == 6  # S twice (the first is its evaluation), all-FP16, S's 2 removals, S afresh
    assert data["backend"]["build_noise"] == {"y": 0.0}


def test_noise_of_a_plan_keeps_its_first_engine_for_the_evaluation(rtx, backend_factory):
    backend, _runs = backend_factory(opt_level=0)
    x = {"x": np.zeros((1, 16, 64), dtype=np.float32)}
    plan = frozenset({"ln1_square", "ln1_var"})
    backend.noise(x, plan=plan)
    assert backend.builds == 2
    backend.run(plan, x)
    assert backend.builds == 2  # the evaluation reused the noise's first engine


def test_weak_typing_search_uses_layer_precisions(trt, engines_run_as_built, tmp_path, capsys):
    from fp16bisect.cli.main import main

    out = tmp_path / "o.json"
    code = main(["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"),
                 "--backend", "tensorrt", "--typing", "weak", "-o", str(out), "-q"])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert data["backend"]["typing"] == "weak" and data["search"]["ignored_pins"] == []
    assert all(build["fp16"] and build["obey"] for build in trt._builds)
    assert (tmp_path / "o.timing.cache").read_bytes().startswith(b"+")  # one cache, saved beside -o
    pinned = [b for b in trt._builds if any(layer["precision"] for layer in b["layers"].values())]
    assert trt._inspected == len(pinned) > 0  # every engine with pins is inspected (the all-FP16 ones need not)


def test_ignored_pins_are_recorded_and_not_evidence_and_the_search_still_verifies(
        trt, engines_run_as_built, tmp_path, capsys):
    """The fake fuses LayerNorm-1's variance with its epsilon (NVIDIA/TensorRT#3889): pinning the culprits
    alone is ignored, so those plans are not evidence; the search ends on a set whose pins hold."""
    from fp16bisect.cli.main import main

    trt._myelin = [["ln1_square", "ln1_var", "ln1_add_eps"]]
    out = tmp_path / "o.json"
    code = main(["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"),
                 "--backend", "tensorrt", "--typing", "weak", "-o", str(out)])
    captured = capsys.readouterr()
    err = captured.err
    assert code == 0, err
    said = [line for line in err.splitlines() if line.startswith("fp16bisect: TensorRT ignored")]
    layer = "{ForeignNode[ln1_square...ln1_add_eps]}"
    summary = [line for line in (captured.out + err).splitlines() if "could not be built" in line]
    assert summary and layer in summary[0]  # the layer name survives the console's markup
    assert sorted(said) == [  # once per node and layer, though several plans met each
        f"fp16bisect: TensorRT ignored the FP32 pin on {node} (fused into {layer}); use the default strongly typed "
        "build" for node in ("ln1_add_eps", "ln1_square", "ln1_var")]
    data = json.loads(out.read_text())
    search = data["search"]
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["ln1_add_eps", "ln1_square", "ln1_var"]
    # removing any member leaves part of the fused region pinned, a plan TensorRT does not build as asked: no
    # removal could be evaluated, so the set passes but is not called 1-minimal, and says which members and why
    assert search["verified"] and not search["minimal"]
    assert sorted((u["node"], u["reason"]["kind"]) for u in search["unverified"]) == [
        ("ln1_add_eps", "pins_ignored"), ("ln1_square", "pins_ignored"), ("ln1_var", "pins_ignored")]
    assert "kept, not verified: ln1_add_eps" in " ".join(captured.out.split())
    assert "the emulator's set could not be evaluated on the tensorrt backend (pins_ignored" in err
    print("evaluations", search["evaluations"], "unevaluable", search["unevaluable"])
    assert search["ignored_pins"] and all(p["layer"] == layer for p in search["ignored_pins"])
    assert {p["node"] for p in search["ignored_pins"]} <= {"ln1_square", "ln1_var", "ln1_add_eps"}
    assert ["ln1_square", "ln1_var"] in [p["fp32"] for p in search["ignored_pins"]]
    unreliable = {tuple(f["fp32"]) for f in search["build_failures"]}
    assert {tuple(p["fp32"]) for p in search["ignored_pins"]} <= unreliable
    assert all("use the default strongly typed build" in f["error"] for f in search["build_failures"])


def test_typing_weak_is_refused_where_there_is_no_weak_typing(rtx, engines_run_as_built, tmp_path, capsys):
    from fp16bisect.cli.main import main

    argv = ["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"), "-o",
            str(tmp_path / "o.json"), "-q", "--typing", "weak"]
    assert main([*argv, "--backend", "tensorrt"]) == 2
    err = capsys.readouterr().err
    assert err == (f"fp16bisect: error: --typing weak needs TensorRT 10.x, and tensorrt_rtx {rtx.__version__} is "
                   "always strongly typed (no layer precisions): drop --typing weak\n")
    assert main([*argv, "--backend", "emulate"]) == 2
    assert "--typing weak builds TensorRT 10.x engines" in capsys.readouterr().err
    assert main([*argv[:-2], "--typing", "loose", "--backend", "emulate"]) == 2
    check = ["check", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"), "--typing", "weak"]
    assert main([*check, "--backend", "tensorrt"]) == 2
    assert "--typing weak needs TensorRT 10.x" in capsys.readouterr().err


@pytest.fixture
def refused(monkeypatch):
    """Builds TensorRT refuses: each message put in the list makes the next build through Polygraphy's
    ``EngineBytesFromNetwork`` log it as TensorRT's error and fail as Polygraphy does (no engine)."""
    import polygraphy.backend.trt as loaders
    from polygraphy.backend.trt import util
    from polygraphy.logger import G_LOGGER

    messages: list[str] = []

    def build(network, config=None, save_timing_cache=None, real=loaders.EngineBytesFromNetwork):
        if not messages:
            return real(network, config=config, save_timing_cache=save_timing_cache)

        def fail():
            util.TRT_LOGGER.log(util.trt.Logger.ERROR, messages.pop(0))
            G_LOGGER.critical("Invalid Engine. Please ensure the engine was built correctly")

        return fail

    monkeypatch.setattr(loaders, "EngineBytesFromNetwork", build)
    return messages


def test_tensorrt_10_before_10_7_says_why_a_strongly_typed_batchnorm_model_may_not_build(
        rtx, monkeypatch, backend_factory, refused):
    """TensorRT 10.3's strongly typed route (built by TensorRT-RTX), its BatchNormalization refused."""
    from fp16bisect.errors import BuildFailed

    monkeypatch.setattr(trt_load, "load", lambda real=trt_load.load: replace(
        real(), flavour="tensorrt", version="10.3.0.26", weakly_typed=True))
    backend, _runs = backend_factory(SAMPLES / "cnn_batchnorm.onnx", opt_level=0)
    refused.append("Error Code 4: ... (node_of_bn1_out: mixed precision BatchNormalization)")
    with pytest.raises(BuildFailed, match="BatchNormalization in strongly typed mode from 10.7 on: upgrade "
                                          "TensorRT, or pass --typing weak"):
        backend.run(frozenset(), {"image": np.zeros((1, 3, 8, 8), dtype=np.float32)})
    refused.append("Error Code 2: out of memory")
    with pytest.raises(BuildFailed) as err:
        backend.run(frozenset(), {"image": np.zeros((1, 3, 8, 8), dtype=np.float32)}, repeat=1)
    assert "10.7" in str(err.value)  # the model has a BatchNormalization: the hint stays, the cause may be it
    backend, _runs = backend_factory()  # transformer_block: no BatchNormalization, no hint
    refused.append("Error Code 2: out of memory")
    with pytest.raises(BuildFailed) as err:
        backend.run(frozenset(), {"x": np.zeros((1, 16, 64), dtype=np.float32)})
    assert str(err.value).endswith("Error Code 2: out of memory")


def test_a_tensorrt_without_strong_typing_falls_back_to_weak_typing_with_a_warning(
        monkeypatch, engines_run_as_built, tmp_path, capsys):
    from fp16bisect.backends.tensorrt.backend import TypingFallbackWarning
    from fp16bisect.cli.main import main

    old = fake_tensorrt.install(fake_tensorrt.make(version="8.6.1.6", strongly_typed_flag=False), monkeypatch)
    out = tmp_path / "o.json"
    code = main(["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"),
                 "--backend", "tensorrt", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert [line for line in err.splitlines() if "STRONGLY_TYPED" in line] == [
        "fp16bisect: tensorrt 8.6.1.6 has no NetworkDefinitionCreationFlag.STRONGLY_TYPED (TensorRT 9.0+): building "
        "weakly typed with layer precisions, each engine checked for ignored pins"]
    with pytest.warns(TypingFallbackWarning):  # without a listener (the Python API): a warning
        from fp16bisect.backends.tensorrt.backend import TensorRTBackend

        TensorRTBackend(Graph.load(TRANSFORMER), timing_cache=tmp_path / "c")
    data = json.loads(out.read_text())
    assert data["backend"]["typing"] == "weak"
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert old._builds and all(build["fp16"] for build in old._builds)


def test_a_tolerance_below_build_to_build_noise_is_refused_unless_told(rtx, engines_run_as_built, tmp_path, capsys):
    from fp16bisect.cli.main import main

    engines_run_as_built["on"] = True
    argv = ["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"),
            "--backend", "tensorrt", "-o", str(tmp_path / "o.json"), "-q"]
    assert main(argv) == 2  # with the emulator's prior, the noise is measured on its set
    err = capsys.readouterr().err
    assert "two builds of the engine of the prior's set (2 node(s) in FP32) differ beyond the tolerance" in err
    assert "--noise-ok" in err
    assert main([*argv, "--prior", "none", "--restart"]) == 2  # without one, on the all-FP16 engine
    assert "two builds of the all-FP16 engine differ beyond the tolerance" in capsys.readouterr().err
    assert main([*argv, "--noise-ok", "--restart"]) == 0


def test_a_model_over_the_protobuf_limit_is_parsed_from_a_file(rtx, engines_run_as_built, tmp_path, monkeypatch):
    import polygraphy.backend.trt as loaders

    import fp16bisect.model.weights as weights
    from fp16bisect.cli.main import main

    monkeypatch.setattr(weights, "PROTOBUF_LIMIT", 50_000)  # transformer_block takes the over-2-GB path
    parsed = []
    monkeypatch.setattr(loaders, "NetworkFromOnnxPath", lambda path, real=loaders.NetworkFromOnnxPath, **kw:
                        parsed.append(path) or real(path, **kw))
    out = tmp_path / "o.json"
    assert main(["search", str(TRANSFORMER), "--inputs", str(SAMPLES / "transformer_block.npz"),
                 "--backend", "tensorrt", "-o", str(out), "-q"]) == 0
    assert sorted(n["name"] for n in json.loads(out.read_text())["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert parsed and all(p.endswith(".onnx") for p in parsed)


def test_real_tensorrt_rtx_parses_a_plan_file_that_refers_to_the_weights_where_they_are(tmp_path):
    """A plan's mixed-precision model reaches TensorRT as a small file in the work directory whose weights are
    the model's own bytes (hard-linked) and the work directory's FP16 copies: no copy of a weight."""
    pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX is a test extra: pip install '.[test]'")
    import shutil

    import tensorrt_rtx

    from fp16bisect.artifacts.mixed import mixed_model
    from fp16bisect.backends.tensorrt.backend import _source

    shutil.copy(TRANSFORMER, tmp_path / "model.onnx")
    graph = Graph.load(tmp_path / "model.onnx", workdir=tmp_path / "work")
    source = _source(mixed_model(graph, ["ln1_square", "ln1_var", "q_proj_matmul"]))  # q_proj.weight in FP32
    assert isinstance(source, Path) and source.parent.parent == tmp_path / "work"
    assert source.stat().st_size < 20_000  # the skeleton: the weights stay in their files
    linked = [p for p in source.parent.iterdir() if p.name.startswith("link-")]
    assert [p.stat().st_ino for p in linked] == [(tmp_path / "model.onnx").stat().st_ino]  # the same file
    loaded = trt_load.TensorRT(tensorrt_rtx, "tensorrt_rtx", tensorrt_rtx.__version__, weakly_typed=False)
    _b, network, _p = E.parse(loaded, source)
    assert network.num_layers > 40
    halves = [network.get_layer(i) for i in range(network.num_layers)
              if network.get_layer(i).type == tensorrt_rtx.LayerType.CONSTANT
              and network.get_layer(i).get_output(0).dtype == tensorrt_rtx.DataType.HALF]
    assert halves  # the FP16 copies, read from the work directory's file


def test_real_tensorrt_rtx_parses_a_model_with_external_weights(tmp_path, monkeypatch):
    """Over 2 GB (the limit lowered here) the file TensorRT parses has its weights streamed into ``.data``."""
    pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX is a test extra: pip install '.[test]'")
    import tensorrt_rtx

    import fp16bisect.model.weights as weights
    from fp16bisect.model.runtime import external_copy

    monkeypatch.setattr(weights, "PROTOBUF_LIMIT", 50_000)
    files = external_copy(Graph.load(TRANSFORMER).model)
    assert files.data.stat().st_size > 50_000
    loaded = trt_load.TensorRT(tensorrt_rtx, "tensorrt_rtx", tensorrt_rtx.__version__, weakly_typed=False)
    _b, network, _p = E.parse(loaded, files.model)
    assert network.num_layers == 94


def bf16_backend(monkeypatch, tmp_path, **kwargs):
    """The tensorrt backend over a BF16 graph of the transformer block (engines 'run' as in ``backend_factory``)."""
    from fp16bisect.backends.tensorrt import backend as backend_module
    from fp16bisect.model.precision import BF16

    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda())
    monkeypatch.setattr(backend_module.TensorRTBackend, "_build", planned(backend_module.TensorRTBackend._build))
    monkeypatch.setattr(backend_module.TensorRTBackend, "_execute", lambda self, key, engine, inputs: {
        "y": np.full((1, 16, 64), len(ran_in_fp32(self.graph, engine)), dtype=np.float32)})
    graph = Graph.load(TRANSFORMER, precision=BF16)
    return backend_module.TensorRTBackend(graph, timing_cache=tmp_path / "timing.cache", **kwargs)


def test_a_bf16_plan_builds_its_bfloat16_file_strongly_typed(rtx, monkeypatch, tmp_path):
    import fp16bisect.artifacts.mixed as mixed

    written = []
    monkeypatch.setattr(mixed, "mixed_model", lambda graph, fp32, real=mixed.mixed_model: written.append(
        real(graph, fp32)) or written[-1])
    backend = bf16_backend(monkeypatch, tmp_path, opt_level=0)
    plan = frozenset({"ln1_square", "ln1_var"})
    assert backend.run(plan, {"x": np.zeros((1, 16, 64), dtype=np.float32)})["y"].ravel()[0] == 2.0
    casts = {a.i for n in written[0].graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"}
    assert casts == {onnx.TensorProto.FLOAT, onnx.TensorProto.BFLOAT16}  # to FP32 around the pins, bfloat16 back


def test_weak_typing_bf16_sets_builderflag_bf16_and_pins_fp32_layers(trt, monkeypatch, tmp_path):
    backend = bf16_backend(monkeypatch, tmp_path, typing="weak")
    plan = frozenset({"ln1_square", "ln1_var"})
    backend.run(plan, {"x": np.zeros((1, 16, 64), dtype=np.float32)})
    built = trt._builds[-1]
    assert built["bf16"] and not built["fp16"] and built["obey"]
    assert {n for n, layer in built["layers"].items() if layer["precision"] == "FLOAT"} == plan


def test_weak_typing_bf16_without_the_flag_is_a_usage_error(monkeypatch, tmp_path):
    fake_tensorrt.install(fake_tensorrt.make(bf16_flag=False), monkeypatch)
    with pytest.raises(UsageError, match="has no BuilderFlag.BF16, so it cannot build BF16 weakly typed: drop "
                                         "--typing weak"):
        bf16_backend(monkeypatch, tmp_path, typing="weak")
