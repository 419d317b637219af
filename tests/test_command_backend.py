"""--backend command: any runtime judges a plan. The placeholder contract, git-bisect-run exit codes, outputs
compared when written, the plan files, aborts and resuming, and the ONNX Runtime judge script."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shlex
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import LN, LN_IN, ROOT, SAMPLES, journal_of, one_line_error, run

from fp16bisect.artifacts.mixed import convert
from fp16bisect.backends.command import CommandAborted, check_template, substitute
from fp16bisect.errors import UsageError
from fp16bisect.model import weights
from fp16bisect.evaluation.oracle import EXIT_CODE, OUTPUTS
from fp16bisect.run.options import Judge, SearchOptions
from fp16bisect.run.pipeline import Listener, prepare
from fp16bisect.tolerance import Tolerance

PY = sys.executable
CULPRITS = {"ln1_square", "ln1_var"}  # transformer_block's known set (sample_models/README.md)
SEARCH = ["search", LN, "--inputs", LN_IN, "--backend", "command"]


def write(path, text: str):
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def culprit_judge(tmp_path):
    """A judge by exit code alone: passes iff the plan's override file keeps the known culprits in FP32.
    It counts its runs in a file and, from run ``--abort-at`` on, exits 200 (which aborts the search)."""
    return shlex.quote(str(write(tmp_path / "culprit judge.py", f"""
        import json, sys
        from pathlib import Path
        overrides, counter = sys.argv[1], Path(sys.argv[2])
        runs = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(runs))
        abort_at = int(sys.argv[3]) if len(sys.argv) > 3 else 0
        if abort_at and runs >= abort_at:
            sys.exit(200)
        names = {{n["name"] for n in json.load(open(overrides))["fp32_nodes"]}}
        if len(names) == 1 and "--cannot-with-one" in sys.argv:
            print("no engine for one node", file=sys.stderr)
            sys.exit(125)
        sys.exit(0 if set({sorted(CULPRITS)!r}) <= names else 1)
    """)))


def command_oracle(tmp_path, command, inputs=(LN_IN,), model=LN, stop_early=False):
    """``stop_early`` False (as ``check`` runs): one command on every sample; True (as a search runs): the first
    sample alone, then the rest."""
    options = SearchOptions(Tolerance(), Judge("command", check=command), plans=str(tmp_path / "plans dir"))
    return prepare(str(model), [str(i) for i in inputs], None, options, Listener(), stop_early=stop_early)


# -- placeholders


def test_placeholders_are_substituted_shell_quoted_and_other_braces_left_alone():
    values = {"model": "/a dir/it's model.onnx", "inputs": "/in"}
    line = substitute("run --onnx={model} {inputs} ${model} awk '{print $1}' {device}", values)
    assert line == "run --onnx='/a dir/it'\"'\"'s model.onnx' /in ${model} awk '{print $1}' {device}"
    assert substitute("x {model}", {**values, "device": 3}) == "x '/a dir/it'\"'\"'s model.onnx'"
    with pytest.raises(UsageError, match="names neither {model} nor {overrides}"):
        check_template("python judge.py {inputs} {outputs}")
    with pytest.raises(UsageError, match=r"quotes the placeholder '\{model\}'.*write \{model\} bare"):
        check_template("trtexec --onnx='{model}'")
    check_template("judge {overrides}")


def test_the_files_exist_when_the_command_runs(tmp_path):
    """{model} is the plan's mixed model, {overrides} names the plan's nodes, {inputs} holds one npz per
    sample, {outputs} is empty, {original} is the FP32 model; paths with spaces and quotes survive."""
    seen = tmp_path / "seen 'by' judge"
    seen.mkdir()
    second = tmp_path / "second.npz"
    with np.load(LN_IN) as d:
        np.savez(second, **{k: d[k] * 0.5 for k in d.files})
    out = shlex.quote(f"{seen}/")
    command = (f"cp {{model}} {{overrides}} {out} && ls {{inputs}} > {out}inputs.txt && "
               f"ls -A {{outputs}} > {out}outputs.txt && sha256sum {{original}} > {out}original.txt")
    graph, backend, oracle = command_oracle(tmp_path, command, inputs=(LN_IN, second))
    plan = frozenset({"ln1_square", "ln1_var", "qk_matmul"})
    evaluation = oracle.evaluate(plan)
    assert evaluation.passed and evaluation.verdict_from == EXIT_CODE and evaluation.metrics == ()
    assert evaluation.detail == "exit code 0"
    copied = onnx.load(seen / "model.onnx")
    onnx.checker.check_model(copied, full_check=True)
    assert copied == weights.inline(convert(graph, plan).model)  # the plan's model, weights inside
    assert all(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in [*copied.graph.input,
                                                                                 *copied.graph.output])
    overrides = json.loads((seen / "overrides.json").read_text())
    assert {n["name"] for n in overrides["fp32_nodes"]} == plan
    assert all(set(n) >= {"name", "op_type", "outputs"} for n in overrides["fp32_nodes"])
    assert overrides["schema"] == "fp16bisect.overrides/1" and overrides["model"]["sha256"] == graph.sha256
    assert (seen / "inputs.txt").read_text().split() == ["sample_0.npz", "sample_1.npz"]
    assert (seen / "outputs.txt").read_text() == ""
    assert (seen / "original.txt").read_text().split()[0] == hashlib.sha256(LN.read_bytes()).hexdigest()
    assert not (tmp_path / "plans dir").exists() or not any((tmp_path / "plans dir").iterdir())
    # more placeholders for an executor (a GPU index per concurrent plan): the same substitution
    backend.command = f": {{model}}; echo {{device}} > {out}device.txt"
    assert backend.run_plan(plan, [{}], placeholders={"device": 3}).passed
    assert (seen / "device.txt").read_text() == "3\n"
    backend.close()
    assert not (tmp_path / "plans dir").exists()


# -- exit codes


@pytest.mark.parametrize("tail, passed", [("exit 0", True), ("exit 1", False), ("exit 124", False),
                                          ("exit 126", False), ("exit 127", False)])
def test_exit_codes_pass_and_fail_as_git_bisect_run(tmp_path, tail, passed):
    _, _, oracle = command_oracle(tmp_path, f": {{model}}; echo why >&2; {tail}")
    evaluation = oracle.evaluate(frozenset())
    assert evaluation.passed is passed and not evaluation.error
    assert evaluation.verdict_from == EXIT_CODE and evaluation.metrics == ()
    assert evaluation.detail.startswith(f"exit code {tail.split()[1]}")
    if not passed:
        assert "stderr: why" in evaluation.detail


def test_exit_125_is_a_plan_that_cannot_be_evaluated_with_the_last_stderr_lines(tmp_path):
    _, _, oracle = command_oracle(tmp_path, ": {model}; for i in 1 2 3 4 5; do echo line $i >&2; done; exit 125")
    evaluation = oracle.evaluate(frozenset({"ln1_var"}))
    assert not evaluation.passed and "exited 125 (cannot evaluate)" in evaluation.error
    assert "line 3 | line 4 | line 5" in evaluation.error and "line 2" not in evaluation.error
    assert oracle.build_failures == [evaluation]


@pytest.mark.parametrize("tail, said", [("exit 200", "exited with code 200"),
                                        ("kill -9 $$", "was killed by signal 9 (SIGKILL)"),
                                        ("sh -c 'kill -TERM $$'; exit $?", "exited with code 143 (the shell's code "
                                                                           "for signal SIGTERM)")])
def test_a_signal_or_a_code_above_127_aborts(tmp_path, tail, said):
    _, _, oracle = command_oracle(tmp_path, f": {{overrides}}; {tail}")
    with pytest.raises(CommandAborted, match=rf"the command {re.escape(said)} on plan \w+ \(0 node\(s\) in FP32\)"):
        oracle.evaluate(frozenset())
    assert oracle.history == []  # nothing recorded: a rerun evaluates the plan again


# -- outputs written by the command


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Outputs of the FP32 model for two samples (a pass), scaled ones (a fail), and malformed variants."""
    root = tmp_path_factory.mktemp("outs")
    session = ort.InferenceSession(str(LN), providers=["CPUExecutionProvider"])
    with np.load(LN_IN) as d:
        first = {k: d[k] for k in d.files}
    second = {k: v * 0.5 for k, v in first.items()}
    np.savez(root / "second.npz", **second)
    for label in ("good", "scaled", "partial", "wrong_key", "garbage", "stray", "wrong_shape"):
        (root / label).mkdir()
    for i, feed in enumerate((first, second)):
        y = session.run(["y"], feed)[0]
        np.savez(root / "good" / f"sample_{i}.npz", y=y)
        np.savez(root / "scaled" / f"sample_{i}.npz", y=y * 1.5)
        np.savez(root / "wrong_key" / f"sample_{i}.npz", logits=y)
        np.savez(root / "wrong_shape" / f"sample_{i}.npz", y=y[:, :3])
        np.savez(root / "stray" / f"sample_{i}.npz", y=y)
        (root / "garbage" / f"sample_{i}.npz").write_bytes(b"PK\x03\x04 not really a zip")
    np.savez(root / "partial" / "sample_0.npz", y=y)
    (root / "stray" / "log.txt").write_text("trace")
    return root


@pytest.mark.parametrize("label, error", [
    ("partial", "wrote 1 of 2 output file(s) into {outputs}, not sample_1.npz"),
    ("wrong_key", "sample_0.npz in {outputs} lacks output(s) 'y' (it holds 'logits')"),
    ("garbage", "sample_0.npz in {outputs} is not a readable .npz"),
    ("stray", "wrote 'log.txt' into {outputs}, which holds only sample_0.npz ... sample_1.npz"),
    ("wrong_shape", "outputs for sample 0 do not fit the reference: output 'y' has shape (1, 3, 64)"),
])
def test_partial_or_malformed_outputs_are_a_plan_that_cannot_be_evaluated(tmp_path, references, label, error):
    _, _, oracle = command_oracle(tmp_path, f": {{model}}; cp {references / label}/* {{outputs}}",
                                  inputs=(LN_IN, references / "second.npz"))
    evaluation = oracle.evaluate(frozenset())
    assert not evaluation.passed and error in evaluation.error


def test_outputs_written_are_compared_under_the_tolerance(tmp_path, references):
    inputs = (LN_IN, references / "second.npz")
    _, _, good = command_oracle(tmp_path, f": {{model}}; cp {references / 'good'}/* {{outputs}}", inputs)
    passed = good.evaluate(frozenset())
    assert passed.passed and passed.verdict_from == OUTPUTS
    assert [(m.output, m.sample) for m in passed.metrics] == [("y", 0), ("y", 1)]
    assert all(m.max_abs == 0 for m in passed.metrics)
    _, _, scaled = command_oracle(tmp_path, f": {{model}}; cp {references / 'scaled'}/* {{outputs}}", inputs)
    failed = scaled.evaluate(frozenset())
    assert not failed.passed and failed.verdict_from == OUTPUTS and not failed.error
    assert all(not m.passed and m.excess > 1 for m in failed.metrics)
    # a failing exit code is the verdict, whatever was written
    _, _, exits_1 = command_oracle(tmp_path, f"cp {references / 'good'}/* {{outputs}}; : {{model}}; exit 1", inputs)
    assert not exits_1.evaluate(frozenset()).passed


# -- whole searches


def test_search_by_exit_code_finds_the_known_set_and_records_the_command(culprit_judge, tmp_path, capsys):
    out = tmp_path / "o.json"
    check = f"{PY} {culprit_judge} {{overrides}} {tmp_path / 'runs'} 0 --cannot-with-one"
    # --prior none: the whole search driven by the command's exit codes (with the prior it would only certify)
    code, stdout, err = run(capsys, *SEARCH, "--check", check, "-o", out, "--prior", "none")
    assert code == 0, err
    data = json.loads(out.read_text())
    # the judge cannot evaluate a plan of one node, so neither removal of the pair was evaluated: kept, unverified
    assert {n["name"] for n in data["fp32_nodes"]} == CULPRITS and data["search"]["minimal"] is False
    assert sorted(u["node"] for u in data["search"]["unverified"]) == sorted(CULPRITS)
    assert {u["reason"]["kind"] for u in data["search"]["unverified"]} == {"cannot_evaluate"}
    assert data["backend"]["name"] == "command" and data["backend"]["command"] == check
    assert data["backend"]["verdicts_from"]["exit_code"] >= 2
    assert data["metrics"]["fp16"] is None and data["metrics"]["with_overrides"] is None
    failures = data["search"]["build_failures"]
    assert failures and all(len(f["fp32"]) == 1 and "stderr: no engine for one node" in f["error"] for f in failures)
    assert "running the command on plan" in err and "(2 node(s) in FP32)" in err
    assert "judged by the command's exit code" in stdout and "could not be evaluated" in stdout
    assert not (tmp_path / "o.plans").exists()  # removed after each evaluation, then the directory itself


def test_keep_plans_keeps_every_plan_directory(culprit_judge, tmp_path, capsys):
    out = tmp_path / "o.json"
    check = f"{PY} {culprit_judge} {{overrides}} {tmp_path / 'runs'}"
    assert run(capsys, *SEARCH, "--check", check, "-o", out, "--keep-plans", "-q")[0] == 0
    kept = sorted((tmp_path / "o.plans").iterdir())
    assert len(kept) == json.loads(out.read_text())["search"]["evaluations"]
    for plan in kept:
        names = {p.name for p in plan.iterdir()}
        assert names == {"model.onnx", "overrides.json", "inputs", "outputs", "command.txt", "stdout.txt",
                         "stderr.txt", "samples.txt"}
        assert (plan / "samples.txt").read_text() == f"sample_0.npz\t{LN_IN}\n"
        assert (plan / "command.txt").read_text().startswith(f"{PY} {culprit_judge} {plan}/overrides.json")


def test_an_abort_exits_2_keeps_the_journal_and_a_rerun_resumes(culprit_judge, tmp_path, capsys):
    out = tmp_path / "o.json"
    check = f"{PY} {culprit_judge} {{overrides}} {tmp_path / 'runs'} 3"
    code, _, err = run(capsys, *SEARCH, "--check", check, "-o", out, "-q")
    assert code == 2 and not out.exists()
    line = one_line_error(err)
    assert "exited with code 200" in line and check in line and journal_of(out).name in line
    journal = journal_of(out).read_text().splitlines()
    kinds = [next(iter(json.loads(line))) for line in journal[1:]]  # after the header: the prior, two evaluations
    assert kinds == ["prior", "started", "plan", "started", "plan", "started", "abandoned"]  # then the abort
    assert json.loads(journal[3])["verdict_from"] == EXIT_CODE
    (tmp_path / "runs").write_text("-100")  # the judge is fixed: the same command no longer aborts
    code, _, err = run(capsys, *SEARCH, "--check", check, "-o", out, "--keep-journal")
    assert code == 0 and "resuming: 2 evaluation(s) replayed" in err
    data = json.loads(out.read_text())
    assert {n["name"] for n in data["fp32_nodes"]} == CULPRITS
    assert data["search"]["evaluations_run"] == data["search"]["evaluations"] - 2
    assert int((tmp_path / "runs").read_text()) == -100 + data["search"]["evaluations_run"]
    # another command is another judge: its journal is not replayed, it journals beside it
    code, _, err = run(capsys, *SEARCH, "--check", check + " ", "-o", out, "--keep-journal")
    assert code == 0 and "resuming" not in err and len(list(tmp_path.glob("o.journal-*.jsonl"))) == 2


def test_search_with_the_onnxruntime_judge_script_finds_the_known_set(known, tmp_path, capsys):
    name = "attention_unscaled"
    out = tmp_path / "o.json"
    judge = ROOT / "scripts" / "judge_onnxruntime.py"
    code, _, err = run(capsys, "search", SAMPLES / f"{name}.onnx", "--inputs", SAMPLES / f"{name}.npz",
                       "--backend", "command", "--check", f"{PY} {judge} --provider cpu {{model}} {{inputs}} {{outputs}}",
                       "-o", out, "-q")
    assert code == 0, err
    data = json.loads(out.read_text())
    assert sorted(n["name"] for n in data["fp32_nodes"]) == sorted(known[name]["culprits"])
    assert data["backend"]["verdicts_from"] == {"outputs": data["search"]["evaluations"], "exit_code": 0}
    fp16, final = data["metrics"]["fp16"], data["metrics"]["with_overrides"]
    assert not all(m["passed"] for m in fp16.values()) and all(m["passed"] for m in final.values())


def test_check_with_a_command(culprit_judge, tmp_path, capsys):
    check = f"{PY} {culprit_judge} {{overrides}} {tmp_path / 'runs'}"
    out = tmp_path / "c.json"
    code, stdout, _ = run(capsys, "check", LN, "--inputs", LN_IN, "--backend", "command", "--check", check,
                          "--json", out, "-q")
    assert code == 1 and "FAIL: the command judged the model in all-FP16 failing (exit code 1)" in stdout
    data = json.loads(out.read_text())
    assert data["verdict_from"] == EXIT_CODE and data["outputs"] == {} and data["backend"]["command"] == check
    assert data["fp32_passes"] is True and not (tmp_path / "c.plans").exists()


@pytest.mark.parametrize("argv, said", [
    (["--check", "judge {model}"], "--check is the command of --backend command, not of --backend auto"),
    (["--backend", "command"], "--backend command needs the command that judges a plan: add --check 'CMD'"),
    (["--keep-plans"], "--keep-plans keeps the plan files of --backend command"),
    (["--backend", "command", "--check", "judge {inputs}"], "names neither {model} nor {overrides}"),
])
def test_flags_that_do_not_go_together_exit_2_with_one_line(tmp_path, capsys, argv, said):
    for command in ("search", "check"):
        code, _, err = run(capsys, command, LN, "--inputs", LN_IN, *argv, "-q",
                           *(["-o", tmp_path / "o.json"] if command == "search" else []))
        assert code == 2 and said in one_line_error(err), (command, err)


# -- the trtexec judge script, against a stand-in trtexec (no GPU here)

FAKE_TRTEXEC = """\
#!{python}
# A stand-in for trtexec: the flags judge_trtexec.py passes, its JSON export (6 significant digits, bare inf/nan).
# The "engine" is the ONNX path; running it is ONNX Runtime CPU with FP16 storage made explicit.
import os, sys
flags = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in sys.argv[1:])
if "saveEngine" in flags:
    if "stronglyTyped" not in flags or "skipInference" not in flags:
        sys.exit("[E] expected --stronglyTyped --skipInference")
    if os.environ.get("FAKE_TRTEXEC_BUILD_FAILS"):
        print("[E] Error Code 4: Internal Error (could not find any implementation for node ln1_var)")
        sys.exit(1)
    open(flags["saveEngine"], "w").write(flags["onnx"])
    sys.exit(0)
import numpy as np
import onnx, onnxruntime as ort
from fp16bisect.artifacts.verify import storage_emulation
model = onnx.load(open(flags["loadEngine"]).read())
feed = {{}}
for item in flags["loadInputs"].split(","):
    name, path = item.rsplit(":", 1)
    name = name.strip("'")
    spec = next(v for v in model.graph.input if v.name == name)
    feed[name] = np.fromfile(path, np.float32).reshape([d.dim_value for d in spec.type.tensor_type.shape.dim])
session = ort.InferenceSession(storage_emulation(model).SerializeToString(), providers=["CPUExecutionProvider"])
names = [o.name for o in session.get_outputs()]
with open(flags["exportOutput"], "w") as f:
    f.write("[\\n")
    for i, (name, value) in enumerate(zip(names, session.run(names, feed))):
        text = ", ".join("%g" % v for v in value.ravel())
        f.write(("  " if i == 0 else ", ") + '{{ "name" : "%s"\\n  , "dimensions" : "%s"\\n  , "values" : [ %s ]\\n  }}\\n'
                % (name, "x".join(map(str, value.shape)), text))
    f.write("]\\n")
"""


@pytest.fixture(scope="module")
def trtexec_judge():
    spec = importlib.util.spec_from_file_location("judge_trtexec", ROOT / "scripts" / "judge_trtexec.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trtexec_exports_with_bare_inf_and_nan_are_read(trtexec_judge, tmp_path):
    export = tmp_path / "out.json"
    export.write_text('[\n  { "name" : "y"\n  , "dimensions" : "2x3"\n  , "values" : [ 1.5, inf, -inf, nan, -nan, '
                      '65504 ]\n  }\n, { "name" : "s"\n  , "dimensions" : ""\n  , "values" : [ 0.25 ]\n  }\n]\n')
    got = trtexec_judge.read_export(export)
    assert got["y"].shape == (2, 3) and got["y"][0, 0] == 1.5 and got["y"][1, 2] == 65504
    assert np.isposinf(got["y"][0, 1]) and np.isneginf(got["y"][0, 2]) and np.isnan(got["y"][1, :2]).all()
    assert got["s"].shape == () and got["s"] == 0.25


def test_the_trtexec_judge_builds_runs_and_writes_outputs(trtexec_judge, known, tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "trtexec"
    fake.parent.mkdir()
    fake.write_text(FAKE_TRTEXEC.format(python=PY))
    fake.chmod(0o755)
    judge = f"{PY} {ROOT / 'scripts' / 'judge_trtexec.py'} {{model}} {{inputs}} {{outputs}} --trtexec {fake}"
    model = SAMPLES / "attention_unscaled.onnx"
    inputs = (SAMPLES / "attention_unscaled.npz",)
    _, _, oracle = command_oracle(tmp_path, judge, inputs, model)
    fp16 = oracle.evaluate(frozenset())
    assert not fp16.passed and fp16.verdict_from == OUTPUTS and fp16.metrics[0].nonfinite > 0  # inf/NaN read back
    final = oracle.evaluate(frozenset(known["attention_unscaled"]["culprits"]))
    assert final.passed and final.metrics[0].nonfinite == 0
    monkeypatch.setenv("FAKE_TRTEXEC_BUILD_FAILS", "1")
    failed = oracle.evaluate(frozenset({"softmax"}))
    assert "exited 125" in failed.error and "could not find any implementation for node ln1_var" in failed.error
    _, _, missing = command_oracle(tmp_path, judge.replace(str(fake), str(tmp_path / "nowhere")), inputs, model)
    with pytest.raises(CommandAborted, match="exited with code 255.*not found: install TensorRT"):
        missing.evaluate(frozenset())


# -- samples most stressing first, a failing plan stopped at its first failing sample


def test_a_failing_plan_runs_the_command_once_on_one_sample_when_the_stressing_sample_goes_first(tmp_path, capsys,
                                                                                                   known):
    """loudness: 7 quiet frames and a loud one (given last). The judge fails a plan that leaves power or energy in
    FP16 on a loud frame. The FP32 profile puts the loud frame first, so each failing plan runs the command once,
    on that frame alone; a passing plan runs it on that frame, then on the 7 others (every sample judged once)."""
    loud = known["loudness"]["loud"][0]
    frames = [SAMPLES / "loudness" / f"frame_{i:02d}.npz" for i in [*range(7), loud]]
    log = tmp_path / "runs.txt"
    judge = write(tmp_path / "judge.py", """
        import json, sys
        from pathlib import Path
        import numpy as np
        overrides, inputs, log = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
        kept = {n["name"] for n in json.load(open(overrides))["fp32_nodes"]}
        files = sorted(inputs.glob("*.npz"))
        loud = any(np.abs(np.load(f)["x"]).max() > 64 for f in files)  # (4x)^2 > 65504
        passed = {"power", "energy"} <= kept or not loud
        named = inputs.parent / "samples.txt"  # which sample each file is
        first = named.read_text().split()[1] if named.exists() else "?"
        with open(log, "a") as f:
            f.write(f"{len(files)} {int(loud)} {int(passed)} {first}\\n")
        sys.exit(0 if passed else 1)
    """)
    out = tmp_path / "o.json"
    check = f"{PY} {judge} {{overrides}} {{inputs}} {log}"
    code, _, err = run(capsys, "search", SAMPLES / "loudness.onnx", *[x for f in frames for x in ("--inputs", f)],
                       "--backend", "command", "--check", check, "-o", out, "--prior", "none", "-q", "--keep-journal")
    assert code == 0, err
    data = json.loads(out.read_text())
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["energy", "power"]
    runs = [line.split() for line in log.read_text().splitlines()]
    failing = [r for r in runs if r[2] == "0"]
    assert failing and all(r[:2] == ["1", "1"] and r[3] == str(frames[-1]) for r in failing)  # one loud sample
    passing = [r for r in runs if r[2] == "1"]
    assert [r[0] for r in passing] == ["1", "7"] * (len(passing) // 2)  # the loud frame, then the 7 others
    assert len(runs) == len(failing) + 2 * data["search"]["evaluations_run"] - 2 * len(failing)
    journal, = tmp_path.glob("o.journal*.jsonl")
    judged = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
    judged = [e for e in judged if "passed" in e]
    assert all(e["samples"] == [7] for e in judged if not e["passed"])
    assert all(sorted(e["samples"]) == list(range(8)) for e in judged if e["passed"])
    assert data["samples"]["decided"][0]["index"] == 7  # the exit code of a one-sample run names its sample
