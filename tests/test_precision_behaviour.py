"""A precision carries its behaviour (limits, risk tiers, ranking, texts, compare's threshold), and headroom is
said right: a tensor of an answer with less than 4x headroom is named with the ``--headroom`` that keeps it,
and no printed number contradicts the comparison in its line.

``--precision bf16`` never shows FP16's numbers (65504, 6.1e-05, 6e-08, compare's 0.125); FP16 output is pinned
elsewhere (tests/test_readme.py runs the docs' FP16 output).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import SAMPLES, run
from onnx import TensorProto, helper

from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import BF16, FP16
from fp16bisect.model.profile import profile
from fp16bisect.model.samples import Sample
from fp16bisect.model.statistics import TensorStats

LOUD = (SAMPLES / "loudness.onnx", SAMPLES / "loudness.npz")  # power_out overflows FP16 (9.8e4), not BF16
FP16_NUMBERS = ("65504", "6.1e-05", "6e-08", "6.103515625e-05", "0.125")


def fp16_numbers_in(text: str) -> list[str]:
    return [n for n in FP16_NUMBERS if n in text]


def test_scan_bf16_shows_bf16s_limits_never_fp16s(capsys, tmp_path):
    model, data = LOUD
    out = tmp_path / "scan.json"
    code, stdout, err = run(capsys, "scan", model, "--inputs", data, "--precision", "bf16", "--json", out)
    assert code == 0, err
    assert fp16_numbers_in(stdout) == [] and fp16_numbers_in(out.read_text()) == []
    assert "BF16 keeps |x| <= 3.39e38; nonzero |x| < 1.18e-38 lose precision" in stdout
    assert "No tensor or weight comes near BF16's limits" in stdout  # 9.8e4 overflows FP16, not BF16
    limits = json.loads(out.read_text())["limits"]
    assert limits == {"bf16_max": BF16.max, "bf16_min_normal": 2.0**-126, "bf16_min_subnormal": 2.0**-133}
    code, stdout, _ = run(capsys, "scan", model, "--inputs", data, "--json", out)
    assert f"scan of {model}: FP16 keeps |x| <= 65504; nonzero |x| < 6.1e-05 lose precision (subnormal), < 6e-08 " \
           "flush to 0" in stdout and "what FP16 does" in stdout
    assert json.loads(out.read_text())["limits"] == {"fp16_max": 65504.0, "fp16_min_normal": 2.0**-14,
                                                     "fp16_min_subnormal": 2.0**-24}


def test_compare_bf16_judges_by_bf16s_own_threshold(capsys):
    model, data = LOUD
    code, stdout, err = run(capsys, "compare", model, "--inputs", data, "--precision", "bf16")
    assert code == 0, err
    said = " ".join(stdout.split())
    assert "max abs error > 1 x the tensor's max |FP32 value|" in said  # 256 x 2^-8
    assert fp16_numbers_in(said) == []
    code, stdout, _ = run(capsys, "compare", model, "--inputs", data)
    assert "max abs error > 0.125 x the tensor's max |FP32 value|" in " ".join(stdout.split())  # 256 x 2^-11


def test_a_bf16_override_file_and_its_console_report_bf16s_limits(capsys, tmp_path):
    model, data = LOUD
    out = tmp_path / "f.json"
    code, stdout, err = run(capsys, "search", model, "--inputs", data, "--precision", "bf16", "--atol", "0.001",
                            "-o", out)
    assert code == 0, err
    section = json.loads(out.read_text())["headroom"]
    assert section["limit"] == BF16.max and section["min_normal"] == 2.0**-126
    assert fp16_numbers_in(out.read_text()) == [] and fp16_numbers_in(stdout) == []
    assert "against 3.39e+38: FP32's range, overflow is not its risk" in " ".join(stdout.split())


def one_tensor_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])
    model = helper.make_model(helper.make_graph([helper.make_node("Neg", ["x"], ["y"], name="neg")], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


VALUES = np.array([70000.0, 3.3962e38, 1e-5, 2.0**-26, 1e-40, 1.0], np.float32)  # 1e-40: an FP32 denormal


@pytest.mark.parametrize("low, overflow, flushed, subnormal, tier, said", [
    (FP16, 2, 1, 2, 3, "> 65504 (2 element(s) become inf)"),
    (BF16, 1, 0, 0, 3, "> 3.39e38 (1 element(s) become inf)"),  # only past 3.3962e38; FP32's range below
])
def test_the_profile_counts_each_precisions_own_limits_in_the_run_as_on_the_whole_tensor(low, overflow, flushed,
                                                                                        subnormal, tier, said):
    graph = Graph(one_tensor_model(), precision=low)
    got = profile(graph, [Sample("s", {"x": VALUES})]).tensors["y"]
    whole = TensorStats("y", low=low)
    whole.add(-VALUES)
    assert (got.overflow, got.flushed, got.subnormal) == (whole.overflow, whole.flushed, whole.subnormal) \
        == (overflow, flushed, subnormal)
    assert got.tier == tier and said in got.describe()


def test_a_tensor_within_2x_of_65504_is_near_the_limit_in_fp16_and_fine_in_bf16():
    for low, tier in ((FP16, 2), (BF16, 0)):
        s = TensorStats("t", low=low)
        s.add(np.array([50000.0, 1.0], np.float32))
        assert s.tier == tier


QUIET8 = [SAMPLES / "loudness" / f"frame_{i:02d}.npz" for i in range(8)]


def test_eight_quiet_samples_name_the_tight_tensor_and_the_headroom_that_keeps_it(capsys, tmp_path):
    """The newcomer's case: all-FP16 passes on 8 ordinary frames, whose peak of power_out is about 30% of 65504
    (3.2-3.7x headroom); louder frames overflow it. The console and the Next: block say so."""
    out = tmp_path / "o.json"
    code, stdout, err = run(capsys, "search", LOUD[0], *[x for p in QUIET8 for x in ("--inputs", p)], "-o", out)
    assert code == 0, err
    said = " ".join(stdout.split())
    assert "All-FP16 already meets the tolerance" in said
    assert "warning: 1 FP16 tensor(s) with less than 4x headroom: 'power_out' (3." in said
    assert "'--headroom 4' keeps their writers and readers in FP32" in said
    after = stdout.split("Next:")[1]
    assert "less than 4x headroom: 'power_out'" in " ".join(after.split())
    command = next(line.strip() for line in after.splitlines() if line.strip().startswith("fp16bisect search"))
    again = tmp_path / "o.headroom4.json"  # beside the answer, not over it
    assert command.endswith(f"-o {again} --headroom 4")
    code, stdout, err = run(capsys, *command.split()[1:], "-q")  # the command as printed keeps it in FP32
    assert code == 0, err
    assert "power" in {n["name"] for n in json.loads(again.read_text())["fp32_nodes"]}
    assert json.loads(out.read_text())["fp32_nodes"] == []  # the first answer stands


def test_a_tensor_just_under_4x_is_never_printed_as_4x_in_a_line_saying_it_lacks_4x(capsys, tmp_path):
    frame = np.load(SAMPLES / "loudness" / "frame_00.npz")["x"].astype(np.float32)
    x = frame / np.abs(frame).max() * np.float32(np.sqrt(65504 / 3.998) / 4)  # power_out = (4x)^2 at 65504/3.998
    data, out = tmp_path / "tight.npz", tmp_path / "o.json"
    np.savez(data, x=x.astype(np.float32))
    code, stdout, err = run(capsys, "search", LOUD[0], "--inputs", data, "-o", out)
    assert code == 0, err
    assert "(4x headroom)" not in stdout and "(4x)" not in stdout and "(3.998x headroom)" in stdout
    code, stdout, _ = run(capsys, "check", LOUD[0], "--inputs", data, "--overrides", out, "--headroom", "4")
    verdict = " ".join(stdout.split())
    assert code == 1 and "lack 4x headroom: 'power_out'" in verdict
    assert "(4x headroom)" not in verdict and "25.0% of" not in verdict and "(3.998x headroom)" in verdict


def test_a_bf16_report_draws_bf16s_limits_never_fp16s(capsys, tmp_path):
    model, data = LOUD
    report = tmp_path / "r.html"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--precision", "bf16", "--atol", "0.001", "-o",
                       tmp_path / "o.json", "--report", report, "-q")
    assert code == 0, err
    page = report.read_text()
    assert fp16_numbers_in(page) == []
    assert "<h2>FP32 magnitudes against the BF16 range</h2>" in page and "Dashed lines are the BF16 limits" in page
    assert "<h2>Headroom of the tensors computed in BF16</h2>" in page and "<th>of 3.39e+38</th>" in page
