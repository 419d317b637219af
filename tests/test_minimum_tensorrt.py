"""``--objective cost`` on the TensorRT backend: per-node costs from the engine profile (TensorRT's ``IProfiler`` on
the all-FP16 and the all-FP32 engines). Never run on a GPU: timing needs an engine deserialised and run, which only
the test double of TensorRT 10.x does here (tests/fake_tensorrt.py: its weakly typed engines, whose inspector gives
each layer's types, and its stand-in for Polygraphy's ``TrtRunner``, which reports each engine layer's time to the
profiler set on its context), so the engines are built weakly typed; the timing is the same code either way."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import run
from test_minimum import heavy_and_light

import fake_tensorrt
from fp16bisect.backends.tensorrt import backend as backend_module
from fp16bisect.backends.tensorrt import engine as E
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.model.graph import Graph

X = {"x": np.random.default_rng(0).uniform(70000, 100000, (8, 8)).astype(np.float32)}  # 8 sum past FP16's max
SLOWER_IN_FP32_MS = {"P": 2.0, "Q1": 0.0, "Q2": 0.0, "M": 0.0}  # what FP32 adds per layer, by its ONNX node


def layer_ms(layer) -> float:
    """0.1 ms per layer in FP16; in FP32, SLOWER_IN_FP32_MS more: timed, the MatMul P costs 2 ms extra and the
    reduction Q1 and the product Q2 nothing."""
    half = any(fake_tensorrt.tensor_kind_of(t) == "float16" for t in layer["Inputs"] + layer["Outputs"])
    node = str(layer.get("Metadata") or "").removeprefix("[ONNX Layer: ").removesuffix("]")
    return 0.1 + (0.0 if half else SLOWER_IN_FP32_MS.get(node, 0.0))


@pytest.fixture
def gpu_double(monkeypatch, tmp_path):
    """The fake tensorrt, and engines that 'run' (in the stand-in runner) by emulating the nodes their layers ran in
    FP32 (as tests/test_tensorrt.py's engines_run_as_built), on the model saved as ``tmp_path / "m.onnx"``."""
    import polygraphy.backend.trt
    from test_tensorrt import ran_in_fp32

    trt = fake_tensorrt.install(fake_tensorrt.make(), monkeypatch)
    trt._layer_ms = layer_ms
    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda())
    onnx.save(heavy_and_light(cols=8), tmp_path / "m.onnx")
    graph = Graph.load(tmp_path / "m.onnx")
    emulator = EmulateBackend(graph)

    def outputs(engine, feed):
        return emulator.run(ran_in_fp32(graph, engine._data), feed)

    monkeypatch.setattr(polygraphy.backend.trt, "TrtRunner", fake_tensorrt.runner(trt, outputs))
    return trt


def test_the_profiler_sums_each_layers_time_over_the_runs_and_the_backend_maps_layers_to_nodes(gpu_double, tmp_path):
    graph = Graph.load(tmp_path / "m.onnx")
    backend = backend_module.TensorRTBackend(graph, timing_cache=tmp_path / "t.cache", typing="weak")
    fp16 = backend.layer_times(frozenset(), X)
    fp32 = backend.layer_times(frozenset(n.id for n in graph.candidates), X)
    assert fp16 == pytest.approx({"P": 0.1, "Q1": 0.1, "Q2": 0.1, "M": 0.1})
    assert fp32 == pytest.approx({"P": 2.1, "Q1": 0.1, "Q2": 0.1, "M": 0.1})
    profiler = E.timing_profiler(gpu_double)
    for _ in range(2):
        profiler.report_layer_time("L", 0.5)
    assert profiler.times == {"L": 1.0}


def test_the_cost_objective_on_tensorrt_uses_the_engine_profiles_and_the_json_says_which_costs_were_timed(
        gpu_double, tmp_path, capsys):
    np.savez(tmp_path / "x.npz", **X)
    out = tmp_path / "o.json"
    code, printed, err = run(capsys, "search", tmp_path / "m.onnx", "--inputs", tmp_path / "x.npz", "--backend",
                             "tensorrt", "--typing", "weak", "--objective", "cost", "-o", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    minimum = data["search"]["minimum"]
    # timed, P costs 2 ms more in FP32 and Q1, Q2 only their Casts' estimate: {Q1, Q2} is the cheapest, {P} the fewest
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["Q1", "Q2"]
    assert minimum["measured_nodes"] == ["M", "P", "Q1", "Q2"] and minimum["costs_estimated"] == 0
    assert minimum["cost_us"] < 100 and minimum["fewest_nodes"] == 1 and minimum["fewest_nodes_cost_us"] > 2000
    assert "timing each layer of the all-FP16 and the all-FP32 engines" in err
    assert "4 node(s) timed, the rest estimated" in printed
    assert run(capsys, "search", tmp_path / "m.onnx", "--inputs", tmp_path / "x.npz", "--objective", "cost", "--backend", "emulate",
               "-o", tmp_path / "e.json", "-q")[0] == 0  # the emulate backend times nothing: the estimate
    estimated = json.loads((tmp_path / "e.json").read_text())
    assert estimated["search"]["minimum"]["measured_nodes"] == []
    assert estimated["search"]["minimum"]["fewest_nodes_cost_us"] < 1  # P's estimate: an 8x8 MatMul, not 2 ms
