"""Coverage: samples most stressing first, a failing plan stops at its first failing sample, headroom and
``--headroom``, check on a data set. On the ``loudness`` sample model: 48 frames, 4 loud ones overflow
``power`` (and ``energy`` reads it), the quiet ones peak at 27-31% of 65504."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES, load_make_samples, one_line_error, run

MODEL = SAMPLES / "loudness.onnx"
KNOWN = load_make_samples().KNOWN["loudness"]
FRAMES = [SAMPLES / "loudness" / f"frame_{i:02d}.npz" for i in range(KNOWN["frames"])]
LOUD = [FRAMES[i] for i in KNOWN["loud"]]
QUIET8 = FRAMES[:8]
CULPRITS = sorted(KNOWN["culprits"])


def inputs(paths) -> list[str]:
    return [x for p in paths for x in ("--inputs", str(p))]


def search(capsys, tmp_path, paths, *more, name="o.json"):
    out = tmp_path / name
    code, stdout, err = run(capsys, "search", MODEL, *inputs(paths), "-o", out, *more)
    assert code == 0, err
    return json.loads(out.read_text()), stdout


def evaluations(journal) -> list[dict]:
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    return [e for e in lines if "plan" in e and "passed" in e]


def test_the_quiet_frames_peak_at_a_quarter_of_the_limit_and_only_the_loud_ones_overflow():
    assert set(KNOWN["loud"]) <= set(range(8, 48)) and len(KNOWN["loud"]) == 4  # the first 8 are quiet
    x = [np.load(p)["x"] for p in FRAMES]
    peaks = np.array([float(np.abs(4 * a).max() ** 2) for a in x]) / 65504  # power = (4x)^2
    loud = peaks[KNOWN["loud"]]
    quiet = np.delete(peaks, KNOWN["loud"])
    assert (loud > 1).all() and (0.25 < quiet).all() and (quiet < 0.32).all()


def test_a_failing_plan_runs_one_sample_when_the_stressing_sample_goes_first(capsys, tmp_path):
    data, _ = search(capsys, tmp_path, FRAMES, "--keep-journal")
    assert sorted(n["name"] for n in data["fp32_nodes"]) == CULPRITS
    samples = data["samples"]
    assert samples["count"] == 48 and samples["stop_early"] is True
    assert samples["order"][0]["index"] in KNOWN["loud"]  # the FP32 profile puts a loud frame first
    assert {s["index"] for s in samples["order"][:4]} == set(KNOWN["loud"])  # the four loud ones lead
    first = samples["order"][0]["index"]
    assert samples["decided"] == [{"index": first, "source": str(FRAMES[first]),
                                   "failed_plans": samples["decided"][0]["failed_plans"]}]
    journal, = tmp_path.glob("o.journal*.jsonl")
    judged = evaluations(journal)
    failed = [e for e in judged if not e["passed"]]
    assert failed and all(e["samples"] == [first] for e in failed)  # one sample each
    assert all(len(e["samples"]) == 48 for e in judged if e["passed"])  # a passing plan runs them all
    assert samples["runs"] == len(failed) + 48 * (len(judged) - len(failed))


def test_the_answer_on_every_sample_is_the_answer_on_the_loud_ones(capsys, tmp_path):
    every, _ = search(capsys, tmp_path, FRAMES, "-q", name="all.json")
    loud, _ = search(capsys, tmp_path, LOUD, "-q", name="loud.json")
    assert sorted(n["name"] for n in every["fp32_nodes"]) == sorted(n["name"] for n in loud["fp32_nodes"]) \
        == CULPRITS


def test_a_resumed_and_a_parallel_search_give_the_same_answer(capsys, tmp_path):
    first, _ = search(capsys, tmp_path, FRAMES, "-q", "--keep-journal")
    again, _ = search(capsys, tmp_path, FRAMES, "-q")  # every evaluation replayed from the journal
    assert again["search"]["evaluations_run"] == 0
    parallel, _ = search(capsys, tmp_path, FRAMES, "-q", "--jobs", "2", name="p.json")
    for data in (again, parallel):
        assert [n["name"] for n in data["fp32_nodes"]] == [n["name"] for n in first["fp32_nodes"]]
    assert again["samples"]["decided"] == first["samples"]["decided"]


def test_quiet_frames_alone_pass_all_fp16_but_warn_of_the_headroom(capsys, tmp_path):
    data, stdout = search(capsys, tmp_path, QUIET8)
    assert data["search"]["status"] == "fp16_passes" and data["fp32_nodes"] == []
    tightest = data["headroom"]["tensors"][0]
    assert tightest["tensor"] == "power_out" and tightest["node"] == "power"
    assert 0.25 < tightest["peak_fraction"] < 0.32
    assert tightest["peak_sample"]["source"] in map(str, QUIET8)
    assert "power_out (power): peak" in stdout and "% of 65504" in stdout
    assert data["headroom"]["forced"] == [] and data["headroom"]["flag"] is None


def test_headroom_4_on_quiet_frames_keeps_the_culprits_and_holds_on_the_loud_ones(capsys, tmp_path):
    data, stdout = search(capsys, tmp_path, QUIET8, "--headroom", str(KNOWN["headroom"]))
    assert sorted(n["name"] for n in data["fp32_nodes"]) == CULPRITS
    assert all(n["forced"] is True for n in data["fp32_nodes"])
    assert all("forced by --headroom 4" in n["fp32_profile"] for n in data["fp32_nodes"])
    forced = {f["node"]: f for f in data["headroom"]["forced"]}
    assert set(forced) == set(CULPRITS) and forced["power"]["role"] == "writes" and forced["energy"]["role"] == "reads"
    assert all(f["tensor"] == "power_out" and 0.25 < f["peak_fraction"] < 0.32 for f in forced.values())
    from fp16bisect.artifacts.overrides import problems

    assert problems(data) == ""
    code, out, err = run(capsys, "check", MODEL, *inputs(LOUD), "--overrides", tmp_path / "o.json")
    # the loud frames meet the tolerance; the gate judges with the file's --headroom 4, which one FP16 tensor lacks
    assert code == 1, err
    assert "4 of 4 sample(s) pass" in out and "every sample meets the tolerance" in out
    assert "lack 4x headroom: 'energy_eps'" in out
    assert run(capsys, "check", MODEL, *inputs(LOUD))[0] == 1  # without them, the loud frames fail


def test_check_on_the_data_set_names_the_failing_samples(capsys, tmp_path):
    out = tmp_path / "check.json"
    code, stdout, _ = run(capsys, "check", MODEL, *inputs(FRAMES), "--json", out)
    assert code == 1
    data = json.loads(out.read_text())
    assert data["samples_total"] == 48 and data["samples_passed"] == 44
    assert {w["source"] for w in data["worst_samples"][:4]} == set(map(str, LOUD))
    assert all(not w["passed"] and w["max_abs"]["features"] > 0.5 for w in data["worst_samples"][:4])
    assert data["worst_samples"][4]["passed"] is True
    assert "44 of 48 sample(s) pass" in stdout and f"fails: sample {KNOWN['loud'][0]} ({LOUD[0]})" in stdout
    assert data["headroom"]["tensors"][0]["tensor"] == "power_out"


def test_check_headroom_fails_a_file_whose_fp16_tensors_lack_it(capsys, tmp_path):
    search(capsys, tmp_path, FRAMES, "-q")
    code, stdout, _ = run(capsys, "check", MODEL, *inputs(FRAMES), "--overrides", tmp_path / "o.json")
    assert code == 0 and "48 of 48 sample(s) pass" in stdout
    code, stdout, _ = run(capsys, "check", MODEL, *inputs(FRAMES), "--overrides", tmp_path / "o.json",
                          "--headroom", "2")
    assert code == 1
    assert "lack 2x headroom: 'energy_eps' (written by add_eps)" in stdout
    assert run(capsys, "check", MODEL, *inputs(FRAMES), "--overrides", tmp_path / "o.json",
               "--headroom", "1.2")[0] == 0  # 74% of 65504 leaves more than 1.2x


def test_the_console_names_a_tensor_with_less_than_4x_headroom_and_the_flag(capsys, tmp_path):
    _, stdout = search(capsys, tmp_path, FRAMES)
    assert "less than 4x headroom: 'energy_eps' (1.34x)" in " ".join(stdout.split())
    assert "'--headroom 4' keeps" in stdout


@pytest.mark.parametrize("value", ["1", "0.5", "nan", "x"])
def test_headroom_must_be_above_1(capsys, value):
    code, _, err = run(capsys, "search", MODEL, *inputs(QUIET8), "--headroom", value)
    assert code == 2 and "--headroom" in one_line_error(err)


def test_scan_ranks_by_headroom(capsys, tmp_path):
    out = tmp_path / "scan.json"
    code, stdout, _ = run(capsys, "scan", MODEL, *inputs(QUIET8), "--json", out)
    assert code == 0
    rows = json.loads(out.read_text())["headroom"]
    assert [r["tensor"] for r in rows[:2]] == ["power_out", "energy_eps"] or rows[0]["tensor"] == "power_out"
    assert rows == sorted(rows, key=lambda r: -r["peak"])
    assert "power_out (power): peak" in stdout


def test_the_html_report_plots_the_headroom(capsys, tmp_path):
    search(capsys, tmp_path, FRAMES, "-q", "--report", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert 'id="plot-headroom"' in page and "energy_eps" in page


def test_stress_order_puts_the_sample_nearest_the_limit_first():
    from fp16bisect.model.statistics import stress_order

    peaks = np.array([[10.0, 20000.0], [12.0, 70000.0], [11.0, 30000.0]], dtype=np.float32)
    smallest = np.full(peaks.shape, np.inf, dtype=np.float32)
    assert stress_order(peaks, smallest) == [1, 2, 0]
    assert stress_order(peaks[:1], smallest[:1]) == [0]


def test_an_oracle_tries_the_sample_that_failed_last_first():
    from types import SimpleNamespace

    from fp16bisect.evaluation.oracle import Oracle
    from fp16bisect.evaluation.space import PlanSpace, View
    from fp16bisect.tolerance import Tolerance

    class Backend:
        name = "fake"
        seen: list = []

        def run(self, plan, inputs, repeat=0):
            self.seen.append(inputs["i"])
            bad = inputs["i"] == 2 and "a" not in plan or inputs["i"] == 1 and "b" not in plan
            return {"y": np.array([1.0 if bad else 0.0], np.float32)}

    samples = [SimpleNamespace(inputs={"i": i}, reference={"y": np.zeros(1, np.float32)}, source=f"s{i}")
               for i in range(4)]
    backend = Backend()
    oracle = View(Oracle(backend, samples, Tolerance(), ["y"]), PlanSpace(("a", "b")), stress=(3, 1, 2, 0))
    assert oracle({"a"}) is False and backend.seen == [3, 1]  # stops at the first failing sample
    backend.seen.clear()
    assert oracle({"b"}) is False and backend.seen == [1, 3, 2]  # the one that failed last goes first
    backend.seen.clear()
    assert oracle({"a", "b"}) is True and backend.seen == [2, 1, 3, 0]
    assert oracle.memo[frozenset({"b"})].samples == (1, 3, 2)


def test_a_headroom_search_writes_its_report_with_the_all_fp16_contrast(capsys, tmp_path):
    """With --headroom every plan holds the forced nodes, so the search never judges all-FP16: the report emulates
    it (it crashed on a missing all-FP16 evaluation before)."""
    report = tmp_path / "r.html"
    data, _ = search(capsys, tmp_path, QUIET8, "--headroom", str(KNOWN["headroom"]), "--report", report, "-q")
    assert sorted(n["name"] for n in data["fp32_nodes"]) == CULPRITS
    page = report.read_text()
    assert "power" in page and "energy" in page and "features" in page


def test_the_json_says_which_nodes_headroom_forced_and_minimal_is_beyond_them(capsys, tmp_path):
    """loudness on all 48 frames: the search alone keeps power and energy. --headroom 4 forces more (on the loud
    frames the energy and its normalisation peak above 65504/4 too), and those forced nodes alone pass: the answer
    is the forced set, ``minimal`` is true though power and energy alone would do, because it is 1-minimal beyond
    the forced nodes, which ``search.forced_by_headroom`` names. Without --headroom the key is absent; with a
    --headroom that forces nothing it is empty."""
    plain, _ = search(capsys, tmp_path, FRAMES, "-q", name="plain.json")
    assert "forced_by_headroom" not in plain["search"] and plain["search"]["minimal"] is True
    assert sorted(n["name"] for n in plain["fp32_nodes"]) == CULPRITS
    forced, _ = search(capsys, tmp_path, FRAMES, "-q", "--headroom", "4", name="forced.json")
    named = forced["search"]["forced_by_headroom"]
    assert set(CULPRITS) < set(named) and [n["name"] for n in forced["fp32_nodes"]] == named
    assert all(n["forced"] is True for n in forced["fp32_nodes"])
    assert forced["search"]["minimal"] is True and "forced by --headroom alone pass" in forced["search"]["minimality"]
    quiet, _ = search(capsys, tmp_path, QUIET8, "-q", "--headroom", "4", name="quiet.json")
    assert sorted(quiet["search"]["forced_by_headroom"]) == CULPRITS  # the quiet frames' power: 27-31% > 25%
    wide, _ = search(capsys, tmp_path, QUIET8, "-q", "--headroom", "1.1", name="wide.json")
    assert wide["search"]["forced_by_headroom"] == [] and wide["fp32_nodes"] == []  # given, nothing forced
    from fp16bisect.artifacts.overrides import problems

    assert problems(forced) == problems(quiet) == problems(wide) == ""


def header_of(journal) -> dict:
    return json.loads(Path(journal).read_text().splitlines()[0])


def test_a_search_with_another_headroom_or_shape_profile_never_resumes_the_verdicts_of_the_first(capsys, tmp_path):
    """The journal beside -o is keyed by the search: --headroom and the deployment's shape profile are part of it.
    With --headroom 4 then without, the second search evaluates afresh in a journal of its own; the same --headroom
    again resumes every verdict; a shape profile is another search again."""
    out = tmp_path / "o.json"
    argv = ["search", MODEL, *inputs(QUIET8), "-o", out, "--keep-journal"]
    code, _, err = run(capsys, *argv, "--headroom", "4")
    assert code == 0 and "resuming" not in err
    first = json.loads(out.read_text())
    code, _, err = run(capsys, *argv)
    assert code == 0 and "resuming" not in err
    plain = json.loads(out.read_text())
    assert plain["search"]["evaluations_run"] == plain["search"]["evaluations"] > 0
    assert plain["search"]["journal"] != first["search"]["journal"] and plain["fp32_nodes"] == []
    assert header_of(first["search"]["journal"])["headroom"] == 4.0
    assert "headroom" not in header_of(plain["search"]["journal"])
    code, _, err = run(capsys, *argv, "--headroom", "4")
    assert code == 0 and "resuming:" in err
    again = json.loads(out.read_text())
    assert again["search"]["evaluations_run"] == 0 and again["search"]["journal"] == first["search"]["journal"]
    assert again["fp32_nodes"] == first["fp32_nodes"]
    profile = [x for k in ("min", "opt", "max") for x in (f"--{k}-shapes", "x:1x64")]
    code, _, err = run(capsys, *argv, *profile)
    assert code == 0 and "resuming" not in err, err
    shaped = json.loads(out.read_text())
    assert shaped["search"]["journal"] not in (plain["search"]["journal"], first["search"]["journal"])
    assert header_of(shaped["search"]["journal"])["shapes"] == {"x": [[1, 64], [1, 64], [1, 64]]}
    assert len(list(tmp_path.glob("o.journal-*.jsonl"))) == 3


def test_headroom_in_the_api_and_a_manifest_means_what_the_flag_means(capsys, tmp_path):
    """headroom=4 on the 8 quiet frames keeps power and energy, as --headroom 4 does, and that answer holds on the
    loud frames; check(headroom=2) fails the 48-frame answer as check --headroom 2 does; a manifest entry's
    headroom is the flag's too."""
    import fp16bisect

    found = fp16bisect.search(MODEL, QUIET8, space={"headroom": KNOWN["headroom"]})
    assert sorted(n.name for n in found.fp32_nodes) == CULPRITS
    assert sorted(found.to_dict()["search"]["forced_by_headroom"]) == CULPRITS
    loud = fp16bisect.check(MODEL, LOUD, overrides=found)  # the loud frames pass; judged with the file's headroom 4
    assert not loud.passed and all(m.passed for m in loud.metrics) and "lack 4x headroom: 'energy_eps'" in loud.verdict
    assert fp16bisect.check(MODEL, LOUD, overrides=found, space={"headroom": 1.2}).passed
    every = fp16bisect.search(MODEL, FRAMES)
    assert fp16bisect.check(MODEL, FRAMES, overrides=every).passed
    assert not fp16bisect.check(MODEL, FRAMES, overrides=every, space={"headroom": 2}).passed  # energy_eps peaks at 74%
    assert fp16bisect.check(MODEL, FRAMES, overrides=every, space={"headroom": "1.2"}).passed
    manifest = tmp_path / "zoo.json"
    quiet = [str(p) for p in QUIET8]
    manifest.write_text(json.dumps({"entries": [
        {"model": str(MODEL), "inputs": quiet, "action": "search", "headroom": 4, "name": "forced"},
        {"model": str(MODEL), "inputs": quiet, "action": "search", "name": "plain"},
        {"model": str(MODEL), "inputs": [str(p) for p in FRAMES], "overrides": str(tmp_path / "forced.overrides.json"),
         "headroom": 2, "name": "gate"},
    ]}))
    code, _, err = run(capsys, "batch", manifest, "--json", tmp_path / "batch.json", "--jobs", "1")
    forced, plain, gate = json.loads((tmp_path / "batch.json").read_text())["entries"]
    assert sorted(forced["fp32_nodes"]) == CULPRITS and plain["fp32_nodes"] == []
    assert gate["verdict"] == "FAIL" and "lack 2x headroom" in gate["error"] and code == 1


@pytest.mark.parametrize("value", [1, 0.5, "nan", "x", True])
def test_a_bad_headroom_is_the_same_one_line_from_the_flag_the_api_and_a_manifest(capsys, tmp_path, value):
    """One check, one line: the flag names itself as the flag, the API and a manifest by the key."""
    import fp16bisect

    code, _, err = run(capsys, "search", MODEL, *inputs(QUIET8), "--headroom", str(value))
    flagged = one_line_error(err).removeprefix("fp16bisect: error: ")
    assert code == 2 and flagged.startswith(f"--headroom {value}: give a finite number above 1")
    said = flagged.removeprefix("--")
    for api in (fp16bisect.search, fp16bisect.check):
        with pytest.raises(fp16bisect.UsageError) as raised:
            api(MODEL, QUIET8, space={"headroom": float("nan") if value == "nan" else value})
        assert str(raised.value) == said
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"entries": [{"model": str(MODEL), "inputs": str(QUIET8[0]), "headroom": value}]}))
    code, _, err = run(capsys, "batch", manifest)
    assert code == 2 and one_line_error(err) == f"fp16bisect: error: manifest {str(manifest)!r}, entry 1: {said}"


def test_a_search_reads_each_small_sample_from_disk_once(capsys, tmp_path, monkeypatch):
    """Recent sample files are kept up to a budget: 48 frames of 256 KB are read once each for the whole search
    (validation, profile, every plan), and the references written are not read back."""
    from fp16bisect.model import npz

    npz.forget()
    reads = []
    real = npz._read
    monkeypatch.setattr(npz, "_read", lambda path: reads.append(Path(path).name) or real(path))
    data, _ = search(capsys, tmp_path, FRAMES, "-q")
    assert sorted(n["name"] for n in data["fp32_nodes"]) == CULPRITS
    assert sorted(reads) == sorted(p.name for p in FRAMES)


def test_large_samples_are_not_all_kept(monkeypatch, tmp_path):
    """Beyond the budget the least recent files go; the last file of each slot always stays."""
    from fp16bisect.model import npz

    npz.forget()
    monkeypatch.setattr(npz, "BUDGET", 3 << 20)
    for i in range(6):
        npz.write(tmp_path / f"{i}.npz", {"x": np.full(1 << 18, i, np.float32)})  # 1 MB each
        npz.read(tmp_path / f"{i}.npz", "inputs")
    npz.write(tmp_path / "r.npz", {"y": np.zeros(1 << 20, np.float32)}, "reference")  # 4 MB: over budget alone
    kept = {Path(key[0]).name for key in npz._KEPT}
    assert kept == {"5.npz", "r.npz"}  # the last of each slot; 0..4 went to stay within the budget
    npz.forget()


def test_a_reference_kept_as_written_does_not_keep_the_buffer_it_was_a_view_of(tmp_path):
    """The profile's outputs are views of larger buffers: keeping the view kept 200 MB alive on PP-OCRv4 det."""
    from fp16bisect.model import npz

    npz.forget()
    big = np.zeros((64, 1 << 16), np.float32)
    npz.write(tmp_path / "r.npz", {"y": big[:1]}, "reference")
    (kept,) = [arrays for _, _, arrays in npz._KEPT.values()]
    assert kept["y"].base is None and kept["y"].nbytes == 1 << 18
    npz.forget()
