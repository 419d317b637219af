"""BF16 as the low precision (``--precision bf16``): rounding, constants, one definition, writer, CLI, exports.

The planted model computes ``y = Relu(Sub(Add(x, 64), 64) * 1)``: ``x + 64`` in BF16 (8 significant bits, a
step of 0.5 between 64 and 128) loses up to 0.25 of ``x``, in FP16 (a step of 1/16) up to 0.03. With atol 0.1 the
all-FP16 plan passes, the all-BF16 plan fails, and the answer is {add, sub} by construction: ``add`` rounds its
output, ``sub`` rounds the same value when it reads it in BF16; ``scale`` and ``relu`` read values near 1, whose
BF16 rounding (up to 2^-8 relative) is far inside the tolerance.
"""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import onnx
import pytest
from conftest import run
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.artifacts.mixed import convert
from fp16bisect.artifacts.verify import storage_emulation
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.model.fp16 import constant_as_stored, convert as convert_constant
from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import BF16, FP16, precision_of
from fp16bisect.model.runtime import session

CULPRITS = {"add", "sub"}


def planted(opset: int = 17) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])
    c = numpy_helper.from_array(np.array([64.0], np.float32), "c")
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Sub", ["a", "c"], ["s"], name="sub"),
             helper.make_node("Mul", ["s", "one"], ["m"], name="scale"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "planted", [x], [y], [c, one]),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def sample() -> dict:
    return {"x": np.random.default_rng(0).uniform(-4, 4, 256).astype(np.float32)}


def probe_values() -> np.ndarray:
    """Random bit patterns (every exponent, NaNs included), exact ties at every exponent, and the edges."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**16, size=20_000, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000
    edges = np.array([1e-40, -1e-40, 2**-133, 2**-134, 1.5 * 2**-133, 2**-126, 3.3895e38, 3.3961e38, 3.4028235e38,
                      -3.4028235e38, np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 70000, 1 + 2**-8, 1 + 3 * 2**-8],
                     np.float32)
    return np.concatenate([bits.view(np.float32), ties.view(np.float32), edges])


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_the_emulator_rounds_to_bf16_exactly_as_ml_dtypes_at_every_opset(opset):
    """ONNX Runtime's Cast to bfloat16 (opset 13+; an opset 11 model is version-converted) rounds to nearest even,
    keeps BF16 subnormals, inf and NaN: bit for bit what ml_dtypes does, on 220,000 values."""
    x = probe_values()
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["y"], name="neg")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])]),
        opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    graph = Graph(model, precision=BF16)
    assert graph.opset == 22  # upgraded: the opset the written file has too
    with EmulateBackend(graph) as backend:
        got = backend.run(frozenset(), {"x": x})["y"]
    with np.errstate(all="ignore"):
        want = -x.astype(ml_dtypes.bfloat16).astype(np.float32)  # Neg of the rounded input (exact), rounded
    assert same_bits(got, want).all(), x[~same_bits(got, want)][:5]


def test_bf16_constants_round_to_nearest_even_saturate_lift_and_keep_inf_and_nan():
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45, 1e-39, np.inf, -np.inf,
                       np.nan, 0.0, 2.0**18], np.float32)
    stored, found = convert_constant(values, "c", precision=BF16)
    assert stored.dtype == BF16.dtype
    got = stored.astype(np.float32)
    top = BF16.max
    assert got[:2].tolist() == [1.0, 1 + 4 * 2**-8]  # ties to even
    assert got[2:4].tolist() == [top, -top]  # finite beyond BF16's max saturates (IEEE would give inf)
    assert got[4:6].tolist() == [2.0**-133, -(2.0**-133)]  # below the smallest BF16 subnormal: lifted to it
    assert got[6] == np.float32(1e-39).astype(ml_dtypes.bfloat16).astype(np.float32) and 0 < got[6] < 2**-126
    assert np.isposinf(got[7]) and np.isneginf(got[8]) and np.isnan(got[9]) and got[10] == 0
    assert got[11] == 2.0**18  # beyond FP16, exact in BF16
    assert (found.saturated, found.lifted, found.precision) == (2, 2, "bf16")
    assert "3.39e38" in str(found) and "2^-133" in str(found)
    assert np.array_equal(constant_as_stored(values[:2], BF16), got[:2])
    assert constant_as_stored(np.float32(70000)) == 65504  # FP16's rule unchanged


@pytest.mark.parametrize("opset", [11, 17])
def test_the_emulator_computes_what_the_written_bf16_file_computes(opset):
    """One definition: for several plans, the emulate backend's outputs equal a faithful run of the written file
    (every bfloat16 tensor rounded, arithmetic in FP32); the file passes onnx.checker's full check. (ONNX Runtime's
    CPU provider has no bfloat16 Add or Conv kernels: it runs the file only as ``storage_emulation`` widens it.)"""
    graph = Graph(planted(opset), precision=BF16)
    feed = sample()
    ids = [n.id for n in graph.candidates]
    with EmulateBackend(graph) as backend:
        for plan in (frozenset(), frozenset(CULPRITS), frozenset(ids[::2]), frozenset(ids)):
            mixed = convert(graph, plan).model
            onnx.checker.check_model(mixed, full_check=True)
            types = {t.name: t.data_type for t in mixed.graph.initializer}
            assert (TensorProto.BFLOAT16 in types.values()) == (plan != frozenset(ids))
            written = session(storage_emulation(mixed), "the written file").run(["y"], feed)[0]
            np.testing.assert_allclose(backend.run(plan, feed)["y"], written, rtol=1e-6, atol=1e-6)


def test_search_bf16_finds_the_planted_pair_and_the_file_says_bf16(tmp_path, capsys):
    model, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(planted(), model)
    np.savez(data, **sample())
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--atol", "0.1", "--rtol", "0", "-o", out, "-q")
    assert code == 0 and json.loads(out.read_text())["fp32_nodes"] == []  # FP16 passes: nothing to keep
    assert json.loads(out.read_text())["precision"] == "fp16"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--atol", "0.1", "--rtol", "0", "-o", out, "-q",
                       "--precision", "bf16")
    assert code == 0, err
    found = json.loads(out.read_text())
    assert found["precision"] == "bf16"
    assert {n["name"] for n in found["fp32_nodes"]} == CULPRITS and found["search"]["minimal"]
    exports = found["exports"]
    assert exports["modelopt_autocast"]["args"][:2] == ["--low_precision_type", "bf16"]
    assert exports["trtexec"]["args"][0] == "--bf16"

    # check: with the file's precision (given, or the file's when not) it passes; with the other one it is
    # refused (exit 2, one line)
    code, _, err = run(capsys, "check", model, "--inputs", data, "--atol", "0.1", "--rtol", "0", "--overrides", out,
                       "--precision", "bf16", "-q")
    assert code == 0, err
    code, _, err = run(capsys, "check", model, "--inputs", data, "--overrides", out, "-q")
    assert code == 0, err  # the file's precision and tolerance (atol 0.1, rtol 0)
    code, _, err = run(capsys, "check", model, "--inputs", data, "--atol", "0.1", "--rtol", "0", "--overrides", out,
                       "--precision", "fp16", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "searched for BF16, but this run runs FP16: add --precision bf16" in err
    code, _, _ = run(capsys, "check", model, "--inputs", data, "--atol", "0.1", "--rtol", "0", "--precision", "bf16",
                     "-q")
    assert code == 1  # all-BF16 fails

    # apply: the file's precision, bfloat16 in the written model; a conflicting --precision is exit 2
    mixed = tmp_path / "m.mixed.onnx"
    code, _, err = run(capsys, "apply", model, out, "-o", mixed, "--verify", "--inputs", data, "-q")
    assert code == 0, err
    written = onnx.load(mixed)
    onnx.checker.check_model(written, full_check=True)
    assert {t.data_type for t in written.graph.initializer} >= {TensorProto.BFLOAT16}
    casts = {a.i for n in written.graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"}
    assert TensorProto.FLOAT16 not in casts and TensorProto.BFLOAT16 in casts
    code, _, err = run(capsys, "apply", model, out, "-o", mixed, "--precision", "fp16", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--precision fp16 conflicts" in err


def test_an_old_override_file_without_precision_reads_as_fp16(tmp_path, capsys):
    model, data, out = tmp_path / "m.onnx", tmp_path / "x.npz", tmp_path / "o.json"
    onnx.save(planted(), model)
    np.savez(data, **sample())
    code, _, err = run(capsys, "search", model, "--inputs", data, "--atol", "0.02", "--rtol", "0", "-o", out, "-q")
    assert code == 0, err
    old = json.loads(out.read_text())
    del old["precision"]
    out.write_text(json.dumps(old))
    code, _, err = run(capsys, "check", model, "--inputs", data, "--atol", "0.02", "--rtol", "0", "--overrides", out,
                       "-q")
    assert code == 0, err
    code, _, err = run(capsys, "check", model, "--inputs", data, "--atol", "0.02", "--rtol", "0", "--overrides", out,
                       "--precision", "bf16", "-q")
    assert code == 2 and "searched for FP16, but this run runs BF16" in err


def test_the_python_api_takes_precision(tmp_path):
    import fp16bisect

    model = tmp_path / "m.onnx"
    onnx.save(planted(), model)
    found = fp16bisect.search(str(model), sample(), tolerance={"atol": 0.1, "rtol": 0}, space="bf16")
    assert {n.name for n in found.fp32_nodes} == CULPRITS
    assert fp16bisect.check(str(model), sample(), found, tolerance={"atol": 0.1, "rtol": 0}, space="bf16").passed
    assert not fp16bisect.check(str(model), sample(), tolerance={"atol": 0.1, "rtol": 0}, space="bf16").passed
    assert fp16bisect.check(str(model), sample(), tolerance={"atol": 0.1, "rtol": 0}).passed
    with pytest.raises(fp16bisect.UsageError, match="unknown precision 'bf8'"):
        precision_of("bf8")


def test_an_unknown_precision_is_exit_2(capsys, tmp_path):
    code, _, err = run(capsys, "scan", tmp_path / "m.onnx", "--inputs", "x.npz", "--precision", "fp8")
    assert code == 2 and "--precision 'fp8': use one of 'fp16', 'bf16'" in err and len(err.strip().splitlines()) == 1


def test_one_definition_of_each_precision():
    assert (FP16.max, FP16.smallest_subnormal, FP16.significant_bits, FP16.onnx_type) == \
        (65504.0, 2.0**-24, 11, TensorProto.FLOAT16)
    assert (BF16.significant_bits, BF16.onnx_type, BF16.tensorrt_type) == (8, TensorProto.BFLOAT16, "BF16")
    assert BF16.max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) and 3.38e38 < BF16.max < 3.4e38
    assert BF16.smallest_subnormal == float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)


def test_silero_vad_all_bf16_fails_where_fp16_passes_and_the_bf16_answer_is_1_minimal(tmp_path):
    """A real model (Silero VAD's LSTM, taken from its PyPI wheel): at atol 0.02 all-FP16 passes (LSTM state
    error 0.008) and all-BF16 fails (0.045); ``search --precision bf16`` finds a set that passes, and removing any
    one of its nodes fails, each removal checked here again on the emulate backend."""
    import copy

    from real_models import SILERO_VAD_SEQ, real_model

    import fp16bisect

    model = str(real_model(SILERO_VAD_SEQ))
    rng = np.random.default_rng(0)
    data = {"input": (rng.standard_normal((8, 576)) * 0.5).astype(np.float32),
            "h": (rng.standard_normal((1, 1, 128)) * 0.5).astype(np.float32),
            "c": (rng.standard_normal((1, 1, 128)) * 0.5).astype(np.float32)}
    tolerance = {"atol": 0.02, "rtol": 0.0}
    assert fp16bisect.check(model, data, tolerance=tolerance).passed
    assert not fp16bisect.check(model, data, space="bf16", tolerance=tolerance).passed
    out = tmp_path / "o.json"
    found = fp16bisect.search(model, data, space="bf16", output=out, tolerance=tolerance)
    answer = json.loads(out.read_text())
    names = [n["name"] for n in answer["fp32_nodes"]]
    assert answer["precision"] == "bf16" and answer["search"]["minimal"] and 1 <= len(names) < 17
    assert fp16bisect.check(model, data, answer, space="bf16", tolerance=tolerance).passed
    for name in names:
        fewer = copy.deepcopy(answer)
        fewer["fp32_nodes"] = [n for n in fewer["fp32_nodes"] if n["name"] != name]
        assert not fp16bisect.check(model, data, fewer, space="bf16", tolerance=tolerance).passed, name
    step = answer["search"]["improvement"]  # then the step that tries smaller sets, within its own budget
    assert found.evaluations - step["evaluations"] < 60 and step["evaluations"] <= step["budget"]


def test_bf16_ranks_by_relative_rounding_and_fp16_by_range(tmp_path):
    """On the planted model, BF16's suspects are the cancellation (``sub`` reads |x| up to 68 and writes up to 4:
    17x) and nothing of FP16's range risks; FP16's ranking finds no suspect there at all."""
    import fp16bisect

    model = tmp_path / "m.onnx"
    onnx.save(planted(), model)
    bf16 = fp16bisect.scan(str(model), sample(), precision="bf16")
    fp16 = fp16bisect.scan(str(model), sample())
    assert bf16.suspects == 1 and bf16.nodes[0].name == "sub" and "grows 17" in bf16.nodes[0].reason
    assert fp16.suspects == 0 and [n.name for n in fp16.nodes] == ["add", "sub", "scale", "relu"]


def test_scan_bf16_says_headroom_against_bf16s_max(tmp_path, capsys):
    model, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(planted(), model)
    np.savez(data, **sample())
    code, out, err = run(capsys, "scan", model, "--inputs", data, "--precision", "bf16")
    assert code == 0, err
    assert "BF16 keeps FP32's range" in out and "against 3.39e+38" in out and "% of 3.39e+38" in out
    code, out, _ = run(capsys, "scan", model, "--inputs", data)
    assert "against 65504" in out and "BF16" not in out


def test_the_bf16_self_test_proves_the_cast_pairs_round_on_this_machine(monkeypatch):
    from fp16bisect.backends.emulate import selftest

    monkeypatch.setattr(selftest, "_OTHERS_DONE", set())
    wrong = [1 + 3 * 2**-8, 1.0, 1.0, 1.0]  # as if 1 + 3 * 2^-8 did not round
    monkeypatch.setitem(selftest.PROBES, "bf16", (wrong, wrong))
    with pytest.raises(RuntimeError, match="BF16 emulation self-test failed"):
        selftest.self_test(BF16)
    monkeypatch.undo()
    monkeypatch.setattr(selftest, "_OTHERS_DONE", set())
    selftest.self_test(BF16)
    assert selftest._OTHERS_DONE == {"bf16"}


def test_a_bf16_run_says_bf16_where_it_said_fp16(tmp_path, capsys):
    """The summary and the verification tables name the precision searched: BF16, not FP16."""
    model, data, out = tmp_path / "m.onnx", tmp_path / "x.npz", tmp_path / "o.json"
    onnx.save(planted(), model)
    np.savez(data, **sample())
    tolerance = ("--atol", "0.1", "--rtol", "0")
    code, stdout, err = run(capsys, "search", model, "--inputs", data, *tolerance, "-o", out, "--precision", "bf16")
    assert code == 0, err
    assert "all BF16: max error" in stdout and "FP16" not in stdout.split("kept in FP32")[0]
    code, stdout, err = run(capsys, "apply", model, out, "-o", tmp_path / "m.mixed.onnx", "--verify", "--inputs", data)
    assert code == 0, err
    assert "with overrides (BF16 storage)" in stdout and "all BF16 (BF16 storage)" in stdout
    said = " ".join(stdout.split())
    assert "node(s) compute in BF16" in said and "constant(s) stored in BF16" in said and "FP16" not in said
    code, stdout, _ = run(capsys, "search", model, "--inputs", data, *tolerance, "-o", tmp_path / "f.json")
    assert "All-FP16 already meets the tolerance" in stdout  # FP16's wording unchanged


def test_a_batch_manifest_takes_precision_as_the_flag_does(tmp_path, capsys):
    model, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(planted(), model)
    np.savez(data, **sample())
    manifest = tmp_path / "zoo.json"
    entry = {"model": str(model), "inputs": str(data), "action": "search", "atol": 0.1, "rtol": 0}
    manifest.write_text(json.dumps({"entries": [{**entry, "precision": "bf16", "name": "bf16"},
                                                {**entry, "name": "fp16"}]}))
    code, _, err = run(capsys, "batch", manifest, "--json", tmp_path / "batch.json", "--jobs", "1", "-q")
    assert code == 0, err
    bf16, fp16 = json.loads((tmp_path / "batch.json").read_text())["entries"]
    assert set(bf16["fp32_nodes"]) == CULPRITS and bf16["result"]["precision"] == "bf16"
    assert fp16["fp32_nodes"] == [] and fp16["result"]["precision"] == "fp16"
    manifest.write_text(json.dumps({"entries": [{**entry, "precision": "fp8"}]}))
    code, _, err = run(capsys, "batch", manifest, "-q")
    assert code == 2 and f"manifest {str(manifest)!r}, entry 1: precision 'fp8': use one of 'fp16', 'bf16'" in err


def test_a_bf16_report_says_bf16(tmp_path, capsys):
    model, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(planted(), model)
    np.savez(data, **sample())
    report = tmp_path / "r.html"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--atol", "0.1", "--rtol", "0", "-o",
                       tmp_path / "o.json", "--precision", "bf16", "--report", report, "-q")
    assert code == 0, err
    page = report.read_text()
    assert '<th colspan="5">all BF16</th>' in page and "<th>all BF16: max abs</th>" in page
    assert "all FP16" not in page


def test_a_failing_bf16_check_gives_the_search_to_run_with_its_precision_and_tolerance(tmp_path, capsys):
    model, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(planted(), model)
    np.savez(data, **sample())
    code, stdout, _ = run(capsys, "check", model, "--inputs", data, "--atol", "0.1", "--rtol", "0",
                          "--precision", "bf16", "-q")
    assert code == 1
    assert stdout.strip().splitlines()[-1].startswith("FAIL in all-BF16: ")
    assert (f"'fp16bisect search {model} --inputs {data} -o m.overrides.json --atol 0.1 --rtol 0 --precision bf16'"
            in stdout)
