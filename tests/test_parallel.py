"""Parallel evaluation: --jobs (worker processes), --ray (a local Ray cluster), workers that die, k-ary rounds.

Ray starts once for this module (``ray.init(num_cpus=2)``, a few seconds). Timing is never asserted: speed is in
scripts/bench_parallel.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SAMPLES, journal_of
from parallel_tasks import die_always, die_once, setup_fails, square, visible
from fp16bisect.cli import main as cli
from fp16bisect.parallel import Parallel
from fp16bisect.parallel.processes import Died, LocalPool
from fp16bisect.run.options import SearchOptions
from fp16bisect.run.pipeline import search_model
from fp16bisect.algorithm.search import search
from fp16bisect.tolerance import Tolerance

MODELS = ("transformer_block", "two_branches", "accumulation")


def _search(name, known, parallel=None, output=None):
    tol = Tolerance(known[name]["atol"], known[name]["rtol"])
    return search_model(str(SAMPLES / f"{name}.onnx"), [str(SAMPLES / f"{name}.npz")],
                        options=SearchOptions(tol, "emulate", parallel=parallel, output=output))


# ----------------------------------------------------------------------------------------- --jobs


def test_four_workers_find_the_same_minimal_set_as_one(known, tmp_path):
    for name in ("two_branches", "accumulation"):  # 5 and 7 members
        serial = _search(name, known)
        out = tmp_path / f"{name}.json"
        parallel = _search(name, known, Parallel(jobs=4), str(out))
        assert parallel.result.fp32 == serial.result.fp32, name
        assert sorted(parallel.result.fp32) == sorted(known[name]["culprits"]), name
        assert parallel.result.minimal and parallel.result.passed
        assert parallel.result.rounds <= serial.result.rounds
        # every evaluation was journaled as it completed: a rerun replays them all
        lines = [line for line in journal_of(out).read_text().splitlines()[1:]
                 if line.startswith('{"plan"')]  # the done lines (each has a started line before it)
        assert len(lines) == parallel.result.evaluations == parallel.overrides.search["evaluations_run"]


def test_the_command_line_with_two_jobs_finds_the_serial_set(known, tmp_path, capsys):
    """Through the CLI, whose console listener (a rich Console) must stay in this process."""
    out = tmp_path / "o.json"
    code = cli.main(["search", str(SAMPLES / "two_branches.onnx"), "--inputs", str(SAMPLES / "two_branches.npz"),
                     "--backend", "emulate", "--jobs", "2", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert sorted(n["name"] for n in data["fp32_nodes"]) == sorted(known["two_branches"]["culprits"])
    assert data["search"]["minimal"] and data["search"]["jobs"] == 2


def test_an_interrupted_parallel_search_resumes_from_its_journal(known, tmp_path):
    out = str(tmp_path / "o.json")
    first = _search("two_branches", known, Parallel(jobs=2), out)
    journal = journal_of(out)
    lines = journal.read_text().splitlines(keepends=True)
    sixth = [i for i, line in enumerate(lines) if line.startswith('{"plan"')][5]
    journal.write_text("".join(lines[:sixth]) + lines[sixth][: len(lines[sixth]) // 2])  # killed mid-write
    again = _search("two_branches", known, Parallel(jobs=2), out)  # after five evaluations were done
    assert again.result.fp32 == first.result.fp32 and again.result.minimal
    assert again.overrides.search["evaluations_run"] == again.result.evaluations - 5
    assert again.overrides.search["build_failures"] == []  # the torn line's plan ran again: it had finished


def test_check_with_two_jobs_gives_the_serial_verdict(known):
    from fp16bisect.diagnose.preflight import check_model
    from fp16bisect.run.options import CheckOptions

    model, data = str(SAMPLES / "cnn_batchnorm.onnx"), [str(SAMPLES / "cnn_batchnorm.npz")]
    serial = check_model(model, data, options=CheckOptions(judge="emulate"))
    parallel = check_model(model, data, options=CheckOptions(judge="emulate", parallel=Parallel(jobs=2)))
    assert (serial.passed, parallel.passed) == (False, False)
    assert parallel.fp32 is not None and parallel.fp32.passed == serial.fp32.passed is True


def test_a_worker_killed_mid_task_loses_only_its_task(tmp_path):
    marker = str(tmp_path / "died")
    with LocalPool(die_once, jobs=2) as pool:
        got = dict(pool.run([(marker, 1), (marker, 2)]))
    assert got == {0: 1, 1: 2}  # the killed task ran again on a fresh worker
    with LocalPool(die_always, jobs=2) as pool:
        got = dict(pool.run(["a", "die", "b"]))
    assert got[0] == "a" and got[2] == "b"
    assert isinstance(got[1], Died) and "SIGKILL" in got[1].reason and "2 attempts" in got[1].reason


def test_a_worker_that_dies_twice_is_a_failed_build_in_the_search():
    """Through the executor and the Oracle: the plan fails with the reason; the search still ends verified."""
    from fp16bisect.evaluation.oracle import Evaluation, Oracle
    from fp16bisect.parallel.executor import PlanExecutor

    class Pool:
        width = 4

        def run(self, args):
            for i, (plan, *_) in enumerate(args):
                yield i, Died("its worker process died (killed by SIGKILL) on each of 2 attempts") \
                    if plan == frozenset({"a", "b"}) else Evaluation(frozenset(plan), {"c"} <= plan, (), 0.0)

        def close(self):
            pass

    oracle = Oracle(None, [], Tolerance(), [], executor=PlanExecutor(Pool(), "test"))
    result = search(list("abcd"), oracle, test_many=oracle.test_many, width=oracle.width)
    assert result.fp32 == ("c",) and result.minimal
    died = [e for e in oracle.build_failures if e.plan == frozenset({"a", "b"})]
    assert all("SIGKILL" in e.error for e in died)


def test_each_worker_sees_only_its_device():
    with LocalPool(visible, devices=["3", "5"], visible_devices=True) as pool:
        seen = {v for _, v in pool.run(range(8))}
    assert pool.width == 2 and seen <= {"3", "5"}


def test_tensorrt_workers_one_per_device_find_the_serial_set_with_the_test_double(known, tmp_path):
    """No GPU and no TensorRT 10.x here: tests/fake_tensorrt.py builds weakly typed in each worker, engines 'run' as
    emulations of what was pinned. Two workers, devices 0 and 1, each with its own timing cache."""
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.samples import add_fp32_references, load_samples
    from fp16bisect.evaluation.oracle import Oracle
    from fp16bisect.backends import Options
    from fp16bisect.parallel.executor import Job, PlanExecutor, evaluate_task
    from parallel_tasks import setup_fake_tensorrt

    path = SAMPLES / "transformer_block.onnx"
    graph = Graph.load(path)
    samples = load_samples(graph, [str(SAMPLES / "transformer_block.npz")])
    add_fp32_references(graph, samples)
    cache = tmp_path / "t.cache"
    job = Job("tensorrt", path.read_bytes(), str(path), graph.sha256, Options.of(timing_cache=str(cache), typing="weak"), samples,
              Tolerance(), ["y"])
    pool = LocalPool(evaluate_task, setup_fake_tensorrt, job, devices=["0", "1"], visible_devices=True)
    oracle = Oracle(None, samples, Tolerance(), ["y"], executor=PlanExecutor(pool, "two fake GPUs"))
    try:
        ids = [n.id for n in graph.candidates]
        result = search(ids, oracle, test_many=oracle.test_many, width=oracle.width)
    finally:
        pool.close()
    assert sorted(result.fp32) == sorted(known["transformer_block"]["culprits"]) and result.minimal
    assert result.rounds < result.evaluations
    assert {p.name for p in tmp_path.iterdir()} == {"t.cache.0", "t.cache.1"}  # one cache per worker


def test_the_command_backend_runs_commands_concurrently_one_per_device(tmp_path, capsys):
    """--backend command --jobs 2 --devices 3,5: each command gets its slot's {device}; the set is the serial one.
    Without --jobs, {device} is 0."""
    judge = tmp_path / "judge.py"
    judge.write_text(
        "import json, sys\n"
        "overrides, device, seen = sys.argv[1:4]\n"
        "open(seen, 'a').write(device + '\\n')\n"
        "names = {n['name'] for n in json.load(open(overrides))['fp32_nodes']}\n"
        "sys.exit(0 if {'ln1_square', 'ln1_var'} <= names else 1)\n")
    model, data = str(SAMPLES / "transformer_block.onnx"), str(SAMPLES / "transformer_block.npz")
    found = {}
    for flags in ([], ["--jobs", "2", "--devices", "3,5"]):
        seen = tmp_path / f"seen{len(flags)}.txt"
        out = tmp_path / f"o{len(flags)}.json"
        check = f"{sys.executable} {judge} {{overrides}} {{device}} {seen}"
        code = cli.main(["search", model, "--inputs", data, "--backend", "command", "--check", check, "-o", str(out),
                         "-q", *flags])
        assert code == 0, capsys.readouterr().err
        result = json.loads(out.read_text())
        found[len(flags)] = [n["name"] for n in result["fp32_nodes"]]
        devices = seen.read_text().split()
        assert len(devices) == result["search"]["evaluations"]
        assert set(devices) == ({"3", "5"} if flags else {"0"})
        assert result["search"]["jobs"] == (2 if flags else 1) and result["search"]["minimal"]
    assert found[0] == found[4] and sorted(found[0]) == ["ln1_square", "ln1_var"]


def test_a_thread_pool_sets_up_one_state_per_device_and_raises_work_errors_here():
    """The command backend's pool: threads of this process, one backend per slot ({device})."""
    from fp16bisect.parallel.executor import ThreadSlots as ThreadPool
    from parallel_tasks import device_as_state, slot_device

    with ThreadPool(slot_device, device_as_state, devices=["2", "5"]) as pool:
        got = dict(pool.run(range(6)))
    assert sorted(got) == list(range(6)) and {device for device, _ in got.values()} <= {"2", "5"}
    with pytest.raises(ZeroDivisionError):
        with ThreadPool(lambda state, x: 1 / x, jobs=2) as pool:
            list(pool.run([1, 0, 2]))


def test_a_setup_error_in_a_worker_is_the_usage_error_it_was():
    from fp16bisect.errors import UsageError

    with pytest.raises(UsageError, match="no such input"):
        with LocalPool(square, setup=setup_fails, jobs=1) as pool:
            list(pool.run([1, 2]))


def test_ray_without_ray_installed_is_exit_2_with_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    model = str(SAMPLES / "fp16_safe.onnx")
    code = cli.main(["search", model, "--inputs", str(SAMPLES / "fp16_safe.npz"), "--ray"])
    assert code == 2 and "pip install 'fp16bisect[ray]'" in capsys.readouterr().err


@pytest.mark.parametrize("devices", ["0,,1", "1,1"])
def test_bad_devices_are_exit_2(devices, capsys):
    code = cli.main(["check", str(SAMPLES / "fp16_safe.onnx"), "--inputs", str(SAMPLES / "fp16_safe.npz"),
                     "--devices", devices])
    assert code == 2 and "--devices" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------- k-ary rounds


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 200), k=st.integers(1, 8), width=st.integers(2, 8), suspects=st.integers(0, 200),
       spare=st.integers(0, 3), seed=st.integers(0, 10**6))
def test_speculative_rounds_return_the_width_one_set_in_no_more_rounds(n, k, width, suspects, spare, seed):
    """Monotone oracles: every one of ``group`` but ``spare`` (any k - spare of them will do: several minimal
    sets, as in the accumulation model); the search at width > 1 must pick the set width 1 picks."""
    import random

    rng = random.Random(seed)
    group = frozenset(rng.sample(range(n), min(k, n)))
    need = max(1, len(group) - spare)
    order = rng.sample(range(n), n)
    suspects = suspects % (n + 1)

    def test(plan):
        return len(group & plan) >= need

    def test_many(plans):
        assert 1 <= len(plans) <= width
        return [test(p) for p in plans]

    one = search(range(n), test, order=order, suspects=suspects)
    many = search(range(n), test, order=order, suspects=suspects, test_many=test_many, width=width)
    assert set(many.fp32) == set(one.fp32) and len(many.fp32) == need and many.minimal
    assert many.rounds <= one.rounds
    assert len({s.round for s in many.trace}) == many.rounds


# ----------------------------------------------------------------------------------------- Ray


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")  # in the test extra; skipped only where it is not installed
    # the workers import the task functions (parallel_tasks) by name: they need tests/ on their path
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}})
    yield ray
    ray.shutdown()


def test_a_local_ray_cluster_finds_the_same_sets(known, ray_cluster, tmp_path):
    serial = _search("two_branches", known)
    on_ray = _search("two_branches", known, Parallel(jobs=1, ray=""))
    assert on_ray.result.fp32 == serial.result.fp32 and on_ray.result.minimal
    assert on_ray.result.rounds < on_ray.result.evaluations  # plans went out together

    from fp16bisect.api.manifest import read_manifest, run_batch

    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"defaults": {"backend": "emulate", "action": "search"}, "entries": [
        {"model": str(SAMPLES / f"{m}.onnx"), "inputs": str(SAMPLES / f"{m}.npz"),
         "atol": known[m]["atol"], "rtol": known[m]["rtol"]} for m in MODELS]}))
    results = run_batch(read_manifest(str(manifest)), ray="")
    assert [sorted(r.fp32_nodes or []) for r in results] == [sorted(known[m]["culprits"]) for m in MODELS]
    assert all(r.passed for r in results)


def test_a_ray_worker_killed_mid_task_is_retried_once_then_counted_as_failed(ray_cluster, tmp_path):
    from fp16bisect.parallel.ray import RayPool

    pool = RayPool(die_once, jobs=2)
    assert dict(pool.run([(str(tmp_path / "m"), 7)])) == {0: 7}  # died, retried, answered
    pool = RayPool(die_always, jobs=2)
    got = dict(pool.run(["a", "die"]))
    assert got[0] == "a" and isinstance(got[1], Died) and "died" in got[1].reason
