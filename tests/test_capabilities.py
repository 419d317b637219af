"""Backends declare what they can do; nobody asks their name (issue 33, item 3).

Outside ``backends/`` and argument parsing (``cli/``) no code compares a backend's name with one of ours: it asks
a capability (``Backend``'s class attributes), or which Protocol the object is (``SampleRunner``, ``PlanJudge``).
So a backend with a name of its own works through the oracle, the executor and the pipeline with no edit outside
its own definition: the doubles below are such backends."""

from __future__ import annotations

import ast
import json
from types import SimpleNamespace

import pytest
from conftest import ROOT, SAMPLES, run

from fp16bisect.backends import Backend, Options, PlanJudge, SampleRunner, Verdict, declared
from fp16bisect.evaluation.oracle import Oracle
from fp16bisect.parallel import Parallel, make_executor

PACKAGE = ROOT / "fp16bisect"
OURS = {"emulate", "tensorrt", "command"}  # the backends' names
LN = ["search", str(SAMPLES / "transformer_block.onnx"), "--inputs", str(SAMPLES / "transformer_block.npz")]
ACC = ["search", str(SAMPLES / "accumulation.onnx"), "--inputs", str(SAMPLES / "accumulation.npz"),
       "--atol", "0.4", "--rtol", "0"]


def name_comparisons(source: str) -> list[str]:
    """``x == "emulate"``, ``x != "command"``, ``x in ("tensorrt", ...)``: each comparison with a backend's name,
    as ``line: code``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, sides, sides[1:]):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                named = [left, right]
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                named = list(right.elts)
            else:
                continue
            if any(isinstance(n, ast.Constant) and n.value in OURS for n in named):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_backends_and_argument_parsing_compares_a_backend_name():
    """Ask what a backend can do (``Backend.evaluation_word``, ``uses_device``, ``emulator_prior``, ...; for a
    name read from a file, ``backends.declared(name)``), or which Protocol it is: never which one it is."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).parts[0]
        if where in ("backends", "cli"):
            continue
        compared = name_comparisons(path.read_text())
        if compared:
            found[str(path.relative_to(ROOT))] = compared
    assert found == {}


def test_the_check_sees_a_comparison_either_way_round():
    code = 'a = backend == "emulate"\nb = "command" != chosen.name\nc = name in ("tensorrt", "x")\nd = k == "value"\n'
    assert [line.split(":")[0] for line in name_comparisons(code)] == ["1", "2", "3"]


def test_each_backend_declares_what_callers_ask():
    emulate, tensorrt, command = (declared(name) for name in ("emulate", "tensorrt", "command"))
    assert (emulate.ranks_by_effect, emulate.emulator_prior, emulate.deterministic) == (True, False, True)
    assert (tensorrt.one_gpu_per_worker, tensorrt.uses_device, tensorrt.deterministic) == (True, True, False)
    assert (command.evaluation_word, command.evaluates_in_threads, command.runs_a_command) == ("evaluated", True, True)
    assert declared("a backend of its own") is Backend  # a new backend's defaults
    assert issubclass(command, PlanJudge) and not issubclass(command, SampleRunner)
    assert issubclass(emulate, SampleRunner) and not issubclass(emulate, PlanJudge)
    assert issubclass(tensorrt, SampleRunner) and not issubclass(tensorrt, PlanJudge)
    cache = tensorrt.for_worker(Options.of(timing_cache="t.cache"), "3").tensorrt.timing_cache
    assert cache == "t.cache.3" and emulate.for_worker(Options(), "3") == Options()


class Relay(Backend):
    """A backend of its own that judges whole plans in threads here, one {device} each: "x" must stay in FP32."""

    name = "relay"
    uses_device = evaluates_in_threads = True

    def __init__(self):
        self.devices = []

    def run_plan(self, plan, inputs_per_sample, repeat=0, placeholders=None):
        self.devices.append(placeholders["device"])
        return Verdict("x" in plan, "said so")


def test_a_new_plan_judge_runs_through_the_oracle_and_the_executor_as_it_declares():
    relay = Relay()
    samples = [SimpleNamespace(inputs={}, source="s0")]
    graph = SimpleNamespace(path=None, sha256="m")
    executor = make_executor(Parallel(devices=["3", "5"]), relay, graph, samples, None, [], Options())
    assert executor is not None and executor.width == 2  # its devices, on threads sharing it
    with Oracle(relay, samples, None, [], executor=executor) as oracle:
        assert oracle.test_many([{"x"}, {"y"}, {"x", "y"}]) == [True, False, True]
        assert oracle.memo[frozenset({"x"})].verdict_from == "exit_code"
    assert sorted(relay.devices) and set(relay.devices) <= {"3", "5"}
    relay.uses_device = False  # no use for --devices: serial
    assert make_executor(Parallel(devices=["3", "5"]), relay, graph, samples, None, [], Options()) is None


def test_a_new_backend_that_declares_the_emulators_capabilities_searches_like_it(fake_backend, tmp_path, capsys):
    """No prior (it is as cheap as the emulator) and the measured-effect ranking on it: the emulator's answer and
    evaluation count, under a name of its own."""
    out = tmp_path / "emulate.json"
    assert run(capsys, *ACC, "-o", out)[0] == 0
    emulated = json.loads(out.read_text())
    fake_backend(name="mirror", deterministic=True, capabilities={"emulator_prior": False, "ranks_by_effect": True})
    code, stdout, err = run(capsys, *ACC, "-o", tmp_path / "mirror.json")
    mirrored = json.loads((tmp_path / "mirror.json").read_text())
    assert code == 0 and mirrored["backend"]["name"] == "mirror"
    assert "(prior)" not in err and "ranking the" in err
    assert [n["name"] for n in mirrored["fp32_nodes"]] == [n["name"] for n in emulated["fp32_nodes"]]
    assert mirrored["search"]["evaluations"] == emulated["search"]["evaluations"]


def test_a_new_plan_judge_records_where_its_verdicts_came_from(fake_backend, tmp_path, capsys):
    fake_backend(name="jury", deterministic=True, verdict=lambda plan: {"ln1_square", "ln1_var"} <= plan)
    code, _, _ = run(capsys, *LN, "-o", tmp_path / "o.json", "--prior", "none")
    data = json.loads((tmp_path / "o.json").read_text())
    assert code == 0 and sorted(n["name"] for n in data["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert data["backend"]["verdicts_from"] == {"outputs": 0, "exit_code": data["search"]["evaluations"]}


@pytest.mark.parametrize("word", ["built", "gauged"])
def test_what_an_evaluation_is_called_comes_from_the_backend(fake_backend, tmp_path, capsys, word):
    fake_backend(name="gauge", capabilities={"evaluation_word": word},
                 fails=lambda plan: "no kernel" if plan == {"ln1_var"} else None)
    code, stdout, _ = run(capsys, *LN, "--prior", "none", "-o", tmp_path / "o.json")
    assert code == 0 and f"1 plan(s) could not be {word} (not evidence either way)" in stdout
