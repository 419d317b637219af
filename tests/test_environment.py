"""An answer that knows where it was verified: the override JSON's ``environment`` (emulate, the tensorrt double
with a fake cuda-python, a judge command's ``--fingerprint``), and ``check`` comparing it with where it runs:
what changed, the command to verify again, ``--strict-environment``'s exit 1."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap

import onnxruntime as ort
import pytest
from conftest import LN, LN_IN, SAMPLES, one_line_error, run

import fake_tensorrt
from test_tensorrt import engines_run_as_built, gpu, rtx  # noqa: F401  (fixtures: TensorRT-RTX, engines 'run')

from fp16bisect.artifacts.overrides import read
from fp16bisect.backends import fingerprint
from fp16bisect.backends.command import PLACEHOLDERS
from fp16bisect.backends.tensorrt import device

CHECK = ["check", LN, "--inputs", LN_IN]
TRANSFORMER = SAMPLES / "transformer_block.onnx"


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """An emulator search's override file for transformer_block (its answer: ln1_square, ln1_var)."""
    import fp16bisect

    out = tmp_path_factory.mktemp("searched") / "o.json"
    fp16bisect.search(str(LN), str(LN_IN), output=str(out))
    return out


def edited(tmp_path, source, name: str = "edited.json", **environment) -> str:
    """A copy of ``source`` whose environment has ``environment``'s values (None: the key removed; no keys at all
    and ``name`` "old.json": the whole section removed, as in a file written before it was recorded)."""
    data = json.loads(source.read_text())
    if name == "old.json":
        del data["environment"]
    for key, value in environment.items():
        if value is None:
            data["environment"].pop(key, None)
        else:
            data["environment"][key] = value
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


# -- what a search records


def test_an_emulator_search_records_the_runtime_and_the_machine(searched):
    import numpy
    import onnx

    env = json.loads(searched.read_text())["environment"]
    assert env["backend"] == "emulate"
    assert (env["onnxruntime"], env["onnx"], env["numpy"]) == (ort.__version__, onnx.__version__, numpy.__version__)
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["cpu"] and env["machine"] and env["os"].startswith(__import__("platform").system())
    assert list(json.loads(searched.read_text()))[:4] == ["schema", "model", "backend", "environment"]
    read(str(searched))  # valid against the schema


def test_a_file_without_environment_still_validates(searched, tmp_path):
    assert read(edited(tmp_path, searched, "old.json")).environment is None


def test_the_tensorrt_backend_records_gpu_tensorrt_and_cuda(rtx, engines_run_as_built, tmp_path, monkeypatch,  # noqa: F811
                                                           capsys):
    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda("NVIDIA L4", (8, 9), driver=12040,
                                                                    runtime=12020))
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", TRANSFORMER, "--inputs", LN_IN, "--backend", "tensorrt", "-o", out, "-q")
    assert code == 0, err
    env = read(str(out)).environment
    assert {k: env[k] for k in ("backend", "tensorrt_flavour", "tensorrt", "gpu", "compute_capability",
                                "cuda_driver", "cuda_runtime")} == {
        "backend": "tensorrt", "tensorrt_flavour": "tensorrt_rtx", "tensorrt": rtx.__version__, "gpu": "NVIDIA L4",
        "compute_capability": "8.9", "cuda_driver": "12.4", "cuda_runtime": "12.2"}
    assert "onnxruntime" not in env and env["python"] and env["cpu"]

    # the same file checked on another GPU and TensorRT: said, exit 0; --strict-environment: exit 1
    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda("NVIDIA A100-SXM4-80GB", (8, 0)))
    older = edited(tmp_path, out, tensorrt="10.3.0")
    check = ["check", TRANSFORMER, "--inputs", LN_IN, "--backend", "tensorrt", "--overrides", older,
             "--timing-cache", tmp_path / "check.timing.cache"]  # not the working directory's
    code, stdout, err = run(capsys, *check)
    assert code == 0, err
    assert "GPU: NVIDIA L4 (8.9) -> NVIDIA A100-SXM4-80GB (8.0)" in stdout
    assert f"TensorRT 10.3.0 -> {rtx.__version__}" in stdout and "CUDA driver" not in stdout
    code, stdout, _ = run(capsys, *check, "--strict-environment")
    assert code == 1
    assert stdout.strip().splitlines()[-1].startswith("FAIL with 2 override node(s) in FP32: every sample meets the "
                                                      "tolerance, but --strict-environment:")


def test_without_a_device_what_cuda_cannot_tell_is_unknown(monkeypatch):
    """TensorRT-RTX on a CPU-only machine: cuda-python imports, the runtime answers, the device calls fail."""
    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda(devices=0, runtime=13000))
    assert device.device() == {"gpu": "unknown", "compute_capability": "unknown", "driver": "unknown",
                               "cuda_driver": "unknown", "cuda_runtime": "13.0"}
    for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime"):  # no cuda-python at all
        monkeypatch.setitem(sys.modules, name, None)
    assert set(device.device().values()) == {"unknown"} and device.gpu_count() == 0


# -- check compares


def test_check_says_what_changed_and_how_to_verify_again(searched, tmp_path, capsys):
    path = edited(tmp_path, searched, onnxruntime="1.20.0", cpu="Some Other CPU")
    report = tmp_path / "check.json"
    code, stdout, err = run(capsys, *CHECK, "--overrides", path, "--json", report)
    assert code == 0, err
    assert f"ONNX Runtime 1.20.0 -> {ort.__version__}" in stdout and "CPU: Some Other CPU -> " in stdout
    # the search of what the check judged, here, written beside the file (never over it)
    again = shlex.join(["fp16bisect", "search", str(LN), "--inputs", str(LN_IN), "-o",
                        str(tmp_path / "edited.emulate.json"), "--backend", "emulate"])
    assert f"verify it again: {again}" in stdout
    assert stdout.strip().splitlines()[-1].startswith("PASS")
    drift = json.loads(report.read_text())["environment"]
    assert [(c["what"], c["recorded"], c["strict"]) for c in drift["changes"]] == [
        ("ONNX Runtime", "1.20.0", True), ("CPU", "Some Other CPU", False)]
    assert drift["here"]["onnxruntime"] == ort.__version__ and drift["fails"] is False and drift["again"] == again

    code, stdout, _ = run(capsys, *CHECK, "--overrides", path, "--strict-environment")
    assert code == 1
    assert (f"--strict-environment: {path} was verified elsewhere (ONNX Runtime 1.20.0 -> {ort.__version__})"
            in stdout.strip().splitlines()[-1])


def test_a_change_strict_does_not_fail_on_passes_strict(searched, tmp_path, capsys):
    path = edited(tmp_path, searched, numpy="1.0.0", os="Plan 9")
    code, stdout, err = run(capsys, *CHECK, "--overrides", path, "--strict-environment")
    assert code == 0, err
    assert "NumPy 1.0.0 -> " in stdout and "OS: Plan 9 -> " in stdout and "fails --strict" not in stdout


def test_the_same_environment_says_nothing(searched, capsys):
    code, stdout, err = run(capsys, *CHECK, "--overrides", searched, "--strict-environment")
    assert code == 0, err
    assert "environment" not in stdout and stdout.strip().splitlines()[-1].startswith("PASS")


def test_a_file_verified_on_another_backend_is_checked_there(searched, tmp_path, capsys):
    path = edited(tmp_path, searched, backend="tensorrt", onnxruntime=None, gpu="NVIDIA L4", tensorrt="10.8.0")
    code, stdout, _ = run(capsys, *CHECK, "--overrides", path)
    assert code == 0
    assert "backend: tensorrt -> emulate" in stdout and "GPU" not in stdout  # the emulator has no GPU to compare
    assert shlex.join(["fp16bisect", "check", str(LN), "--inputs", str(LN_IN), "--overrides", path, "--backend",
                       "tensorrt"]) in stdout
    assert run(capsys, *CHECK, "--overrides", path, "--strict-environment")[0] == 1


def test_a_file_without_environment_cannot_be_compared_and_strict_fails(searched, tmp_path, capsys):
    path = edited(tmp_path, searched, "old.json")
    code, stdout, err = run(capsys, *CHECK, "--overrides", path)
    assert code == 0, err
    assert f"environment: {path} records no environment" in stdout
    code, stdout, _ = run(capsys, *CHECK, "--overrides", path, "--strict-environment")
    assert code == 1 and f"--strict-environment: no environment recorded in {path}" in stdout


def test_strict_environment_without_an_override_file_exits_2(capsys):
    code, _, err = run(capsys, *CHECK, "--strict-environment")
    assert code == 2
    assert "--strict-environment compares where an override file was verified" in one_line_error(err)


def test_the_python_api_check_returns_the_drift(searched, tmp_path):
    import fp16bisect

    path = edited(tmp_path, searched, onnxruntime="1.20.0")
    result = fp16bisect.check(str(LN), str(LN_IN), overrides=path)
    assert result.passed and [str(c) for c in result.drift.changes] == [f"ONNX Runtime 1.20.0 -> {ort.__version__}"]
    strict = fp16bisect.check(str(LN), str(LN_IN), overrides=path, judge={"strict_environment": True})
    assert not strict.passed and strict.drift.fails and "--strict-environment" in strict.verdict
    assert fp16bisect.check(str(LN), str(LN_IN)).drift is None


# -- the command backend's --fingerprint


def judge(tmp_path, fingerprint_text: str | None) -> str:
    """A judge passing iff the plan keeps transformer_block's culprits; with ``fingerprint_text``, it prints that
    for ``--fingerprint`` and exits 0 (without, ``--fingerprint`` fails like any unknown argument)."""
    script = tmp_path / "judge.py"
    answer = (f"if sys.argv[1] == '--fingerprint':\n    print({fingerprint_text!r})\n    sys.exit(0)\n"
              if fingerprint_text is not None else "")
    script.write_text("import json, sys\n" + answer + textwrap.dedent("""
        names = {n["name"] for n in json.load(open(sys.argv[1]))["fp32_nodes"]}
        sys.exit(0 if {"ln1_square", "ln1_var"} <= names else 1)
    """))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{overrides}}"


def test_the_command_fingerprint_is_recorded_verbatim_and_compared(tmp_path, capsys):
    command = judge(tmp_path, "gpu: Fake GPU 9\ntensorrt: 11.0.0")
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "--backend", "command", "--check", command,
                       "-o", out, "-q")
    assert code == 0, err
    env = read(str(out)).environment
    assert env["backend"] == "command" and env["command"] == command
    assert env["fingerprint"] == {"gpu": "Fake GPU 9", "tensorrt": "11.0.0"}

    moved = edited(tmp_path, out, fingerprint={"gpu": "Fake GPU 8", "tensorrt": "11.0.0"})
    check = ["check", LN, "--inputs", LN_IN, "--backend", "command", "--check", command, "--overrides", moved]
    code, stdout, err = run(capsys, *check)
    assert code == 0, err
    assert "fingerprint gpu: Fake GPU 8 -> Fake GPU 9" in stdout
    assert run(capsys, *check, "--strict-environment")[0] == 1


def test_a_command_without_fingerprint_records_the_command_only(tmp_path, capsys):
    command = judge(tmp_path, None)
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "--backend", "command", "--check", command,
                       "-o", out, "-q")
    assert code == 0, err
    env = read(str(out)).environment
    assert env["command"] == command and "fingerprint" not in env


@pytest.mark.parametrize("template, line", [
    ("python judge.py {model} {outputs}", "python judge.py --fingerprint"),
    ("trtexec --onnx={model} --fp16", "trtexec --fingerprint"),
    ("judge --plan={overrides}", "judge --fingerprint"),
    ("{model}", None),
])
def test_the_fingerprint_line_is_the_words_before_the_first_placeholder(template, line):
    assert fingerprint.fingerprint_line(template, PLACEHOLDERS) == line


@pytest.mark.parametrize("text, parsed", [
    ('{"gpu": "L4", "sm": 89}', {"gpu": "L4", "sm": 89}),
    ("gpu: L4\n\ndriver: 550.54.15\n", {"gpu": "L4", "driver": "550.54.15"}),
    ("PASS", None), ("", None), ("[1, 2]", None), ("{not json", None),
])
def test_a_fingerprint_is_a_json_object_or_key_value_lines(text, parsed):
    assert fingerprint.parse(text) == parsed


def test_a_fingerprint_that_hangs_or_fails_is_none(tmp_path):
    assert fingerprint.ask("sh -c 'sleep 30; echo gpu: L4' {model}", PLACEHOLDERS, seconds=0.3) is None
    assert fingerprint.ask("false {model}", PLACEHOLDERS) is None


def test_the_shipped_onnxruntime_judge_prints_a_fingerprint_the_search_records(tmp_path, capsys):
    script = SAMPLES.parent / "scripts" / "judge_onnxruntime.py"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --provider cpu {{model}} {{inputs}} {{outputs}}"
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "--backend", "command", "--check", command,
                       "-o", out, "-q")
    assert code == 0, err
    assert read(str(out)).environment["fingerprint"] == {"onnxruntime": ort.__version__,
                                                            "provider": "CPUExecutionProvider"}


def test_the_driver_release_is_what_nvidia_smi_says_and_unknown_without_it(monkeypatch, tmp_path):
    """nvidia-smi's scripting query, for the device CUDA uses; its change is said, never failed on."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1 $2 $3 $4\" = \"--query-gpu=driver_version --format=csv,noheader -i 0\" ] "
                   "&& echo 550.54.15 && exit 0\nexit 9\n")
    smi.chmod(0o755)
    fake_tensorrt.install_cuda(monkeypatch, fake_tensorrt.make_cuda())
    monkeypatch.setenv("PATH", str(tmp_path))
    assert device.device()["driver"] == "550.54.15"
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert device.device()["driver"] == "unknown"
