"""Sample sources (directories, globs, references matched by name, data-loader scripts, Polygraphy JSON), lazy
samples, and input shapes (what the samples covered, the deployment profile of --min/--opt/--max-shapes).

The model is sample_models/transformer_block: its LayerNorm squares reach 1.6e5 on the sample, so FP16 needs
exactly ln1_square and ln1_var in FP32 (known by construction)."""

from __future__ import annotations

import json
import pickle
import sys

import numpy as np
import onnx
import pytest
from conftest import SAMPLES
from test_tensorrt import configs, engines_run_as_built, gpu, rtx  # noqa: F401 - fixtures: TensorRT-RTX and a GPU

from fp16bisect.cli.main import main
from fp16bisect.model.graph import Graph
from fp16bisect.model.samples import add_fp32_references, load_samples

MODEL = SAMPLES / "transformer_block.onnx"
CULPRITS = ["ln1_square", "ln1_var"]
X = np.load(SAMPLES / "transformer_block.npz")["x"]


def samples_in(folder, count=3):
    """One .npz per sample in ``folder``: the sample with its tokens rolled by 0, 1, 2... (other outputs, the
    same overflows)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"s{i}.npz"
        np.savez(path, x=np.roll(X, i, axis=1))
        paths.append(path)
    return paths


def fp32_outputs(x):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return {"y": sess.run(["y"], {"x": x})[0]}


def search(tmp_path, *argv, name="o.json"):
    out = tmp_path / name
    code = main(["search", str(MODEL), *map(str, argv), "-o", str(out), "-q"])
    return code, (json.loads(out.read_text()) if out.exists() else None)


def culprits(data) -> list:
    return sorted(n["name"] for n in data["fp32_nodes"])


def error_line(capsys) -> str:
    """The error: the last line said (after progress), one line, no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


# --------------------------------------------------------------------------- directories and globs


def test_a_directory_and_a_glob_give_the_answer_of_the_file_list(tmp_path):
    paths = samples_in(tmp_path / "data")
    (tmp_path / "data" / "notes.txt").write_text("not a sample")  # only *.npz are samples
    listed = [x for p in paths for x in ("--inputs", p)]
    code, by_list = search(tmp_path, *listed, name="list.json")
    assert code == 0 and culprits(by_list) == CULPRITS
    code, by_dir = search(tmp_path, "--inputs", tmp_path / "data", name="dir.json")
    assert code == 0
    code, by_glob = search(tmp_path, "--inputs", tmp_path / "data" / "s*.npz", name="glob.json")
    assert code == 0
    for data in (by_dir, by_glob):
        assert culprits(data) == CULPRITS
        assert data["search"]["evaluations"] == by_list["search"]["evaluations"]
        assert data["metrics"] == by_list["metrics"]  # the same samples, in the same order


def test_a_directory_without_samples_and_a_glob_matching_nothing_are_usage_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["check", str(MODEL), "--inputs", str(tmp_path / "empty")]) == 2
    assert "is a directory with no .npz file" in error_line(capsys)
    assert main(["check", str(MODEL), "--inputs", str(tmp_path / "nothing*.npz")]) == 2
    assert "matches no file" in error_line(capsys)


def test_references_in_a_directory_are_matched_to_the_inputs_by_file_name(tmp_path, capsys):
    paths = samples_in(tmp_path / "inputs")
    refs = tmp_path / "refs"
    refs.mkdir()
    for p in reversed(paths):
        np.savez(refs / p.name, **fp32_outputs(np.load(p)["x"]))
    argv = ["check", str(MODEL), "--inputs", str(tmp_path / "inputs"), "--overrides",
            str(write_overrides(tmp_path)), "-q"]
    assert main([*argv, "--reference", str(refs)]) == 0
    assert main([*argv, "--reference", str(refs / "s?.npz")]) == 0
    # the same references under names in the other order: each then meets other inputs, which FP32 itself misses
    for p in paths:
        (refs / p.name).rename(refs / f"{p.name}.old")
    for p, q in zip(paths, reversed(paths)):
        (refs / f"{p.name}.old").rename(refs / q.name)
    assert main([*argv, "--reference", str(refs)]) == 3
    capsys.readouterr()


def write_overrides(tmp_path):
    code, data = search(tmp_path, "--inputs", SAMPLES / "transformer_block.npz", name="culprits.json")
    assert code == 0 and culprits(data) == CULPRITS
    return tmp_path / "culprits.json"


def test_unmatched_reference_names_are_one_line_naming_both_sides(tmp_path, capsys):
    paths = samples_in(tmp_path / "inputs")
    refs = tmp_path / "refs"
    refs.mkdir()
    np.savez(refs / "s0.npz", **fp32_outputs(np.load(paths[0])["x"]))
    np.savez(refs / "s9.npz", **fp32_outputs(np.load(paths[0])["x"]))
    code = main(["search", str(MODEL), "--inputs", str(tmp_path / "inputs"), "--reference", str(refs / "*.npz"),
                 "-o", str(tmp_path / "o.json")])
    assert code == 2
    line = error_line(capsys)
    assert "no --reference for inputs s1.npz, s2.npz" in line and "no --inputs for reference s9.npz" in line
    assert not (tmp_path / "o.json").exists()


def test_plain_file_lists_still_pair_by_position(tmp_path, capsys):
    a, b = samples_in(tmp_path / "inputs", count=2)
    ra, rb = tmp_path / "ra.npz", tmp_path / "rb.npz"  # other names: position decides
    np.savez(ra, **fp32_outputs(np.load(a)["x"]))
    np.savez(rb, **fp32_outputs(np.load(b)["x"]))
    code, data = search(tmp_path, "--inputs", a, "--inputs", b, "--reference", ra, "--reference", rb)
    assert code == 0 and culprits(data) == CULPRITS
    assert main(["check", str(MODEL), "--inputs", str(a), "--inputs", str(b), "--reference", str(ra)]) == 2
    assert "2 --inputs file(s) but 1 --reference file(s)" in error_line(capsys)


# --------------------------------------------------------------------------- data-loader scripts


LOADER = """
import numpy as np

def load_data():
    x = np.load({npz!r})["x"]
    for i in range(3):
        yield {{"x": np.roll(x, i, axis=1)}}

def quiet():
    yield {{"x": np.zeros((1, 16, 64), np.float32)}}

def broken():
    yield {{"x": np.zeros((1, 16, 64), np.float64)}}
"""


def test_a_data_loader_script_gives_the_samples_its_function_yields(tmp_path, capsys):
    script = tmp_path / "loader.py"
    script.write_text(LOADER.format(npz=str(SAMPLES / "transformer_block.npz")))
    paths = samples_in(tmp_path / "data")  # the same three samples, as files
    code, from_files = search(tmp_path, "--inputs", tmp_path / "data", name="files.json")
    code, from_script = search(tmp_path, "--data-loader-script", script, name="script.json")
    assert code == 0 and culprits(from_script) == CULPRITS
    assert from_script["metrics"] == from_files["metrics"] and len(paths) == 3
    # FILE.py:FUNC picks another function: all zeros, which FP16 holds
    assert main(["check", str(MODEL), "--data-loader-script", f"{script}:quiet", "-q"]) == 0
    capsys.readouterr()
    # what it yields is checked like an .npz
    assert main(["check", str(MODEL), "--data-loader-script", f"{script}:broken"]) == 2
    line = error_line(capsys)
    assert "float64" in line and "loader.py:broken[0]" in line
    assert main(["check", str(MODEL), "--data-loader-script", f"{script}:missing"]) == 2
    assert "has no function 'missing'" in error_line(capsys)


def test_a_failing_data_loader_script_is_one_line(tmp_path, capsys):
    script = tmp_path / "bad.py"
    script.write_text("def load_data():\n    raise RuntimeError('no data here')\n    yield\n")
    assert main(["scan", str(MODEL), "--data-loader-script", str(script)]) == 2
    line = error_line(capsys)
    assert "load_data() raised RuntimeError: no data here" in line
    assert main(["scan", str(MODEL), "--data-loader-script", str(tmp_path / "loader.txt")]) == 2
    assert "is not FILE.py or FILE.py:FUNC" in error_line(capsys)


# --------------------------------------------------------------------------- Polygraphy JSON


def test_polygraphy_json_inputs_and_outputs(tmp_path, capsys):
    pytest.importorskip("polygraphy", reason="Polygraphy JSON is read through Polygraphy (the test extra has it)")
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json

    feeds = [{"x": np.roll(X, i, axis=1)} for i in range(2)]
    save_json(feeds, str(tmp_path / "inputs.json"))
    results = RunResults()
    results.append(("onnxrt-runner-N0", [IterationResult(fp32_outputs(f["x"]), runner_name="onnxrt-runner-N0")
                                         for f in feeds]))
    results.save(str(tmp_path / "outputs.json"))
    code, data = search(tmp_path, "--inputs", tmp_path / "inputs.json", "--reference", tmp_path / "outputs.json")
    assert code == 0 and culprits(data) == CULPRITS

    # a reference of another runner's outputs, shifted: the file holds two runners, so the user says which
    other = [IterationResult({"y": fp32_outputs(f["x"])["y"] + 5}, runner_name="trt-runner-N0") for f in feeds]
    results.append(("trt-runner-N0", other))
    results.save(str(tmp_path / "two.json"))
    argv = ["check", str(MODEL), "--inputs", str(tmp_path / "inputs.json"), "--overrides",
            str(tmp_path / "o.json"), "-q"]
    assert main([*argv, "--reference", str(tmp_path / "two.json")]) == 2
    line = error_line(capsys)
    assert "2 runners (onnxrt-runner-N0, trt-runner-N0)" in line and "two.json:onnxrt-runner-N0" in line
    assert main([*argv, "--reference", f"{tmp_path / 'two.json'}:onnxrt-runner-N0"]) == 0
    assert main([*argv, "--reference", f"{tmp_path / 'two.json'}:trt-runner-N0"]) == 3  # off by 5: even FP32
    capsys.readouterr()
    # one output set for two inputs: said, with both counts
    results = RunResults()
    results.append(("r", [IterationResult(fp32_outputs(feeds[0]["x"]), runner_name="r")]))
    results.save(str(tmp_path / "one.json"))
    assert main([*argv, "--reference", str(tmp_path / "one.json")]) == 2
    assert "gives 1 sample(s) but the inputs give 2" in error_line(capsys)


def test_polygraphy_json_without_polygraphy_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "inputs.json").write_text("[]")
    monkeypatch.setitem(sys.modules, "polygraphy", None)  # import polygraphy.json fails: not installed
    monkeypatch.setitem(sys.modules, "polygraphy.json", None)
    assert main(["check", str(MODEL), "--inputs", str(tmp_path / "inputs.json")]) == 2
    assert "pip install polygraphy" in error_line(capsys)


# --------------------------------------------------------------------------- lazy samples


def test_samples_are_read_when_used_and_pickle_as_paths(tmp_path):
    big = tmp_path / "big.npz"
    np.savez(big, x=np.tile(X, (1, 1, 1)))
    graph = Graph.load(MODEL)
    samples = load_samples(graph, [str(big), str(big)])
    assert all(s._inputs is None for s in samples)  # nothing held after the check
    add_fp32_references(graph, samples)
    for s in samples:  # computed references live in the work directory, one .npz per sample
        assert s.reference_file and str(graph.store.directory) in s.reference_file
        assert s._reference is None and set(s.reference) == {"y"}
        assert len(pickle.dumps(s)) < 1000 < X.nbytes
    copy = pickle.loads(pickle.dumps(samples[0]))
    np.testing.assert_array_equal(copy.inputs["x"], X)
    held = pickle.loads(pickle.dumps(samples[0].held()))  # for Ray: the arrays travel
    assert len(pickle.dumps(samples[0].held())) > X.nbytes and held.reference.keys() == {"y"}
    graph.store.close()


# --------------------------------------------------------------------------- shapes


def rms_model():
    """x [1, seq, 64] -> square -> mean (over the last axis) -> root -> y = x / root: inputs near 300 square past
    65504, so FP16 needs square, mean and root (which reads the mean) in FP32, not norm (root's 300 fits FP16);
    its sequence length is dynamic."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["ms"], name="mean", axes=[-1], keepdims=1),
             helper.make_node("Sqrt", ["ms"], ["rms"], name="root"),
             helper.make_node("Div", ["x", "rms"], ["y"], name="norm")]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def dynamic(tmp_path):
    path = tmp_path / "rms.onnx"
    onnx.save(rms_model(), path)
    rng = np.random.default_rng(0)
    (tmp_path / "seq").mkdir()
    for i, seq in enumerate((8, 16)):
        np.savez(tmp_path / "seq" / f"s{i}.npz", x=rng.uniform(250, 300, (1, seq, 64)).astype(np.float32))
    return path


RMS_CULPRITS = ["mean", "root", "square"]


def test_the_result_lists_the_shapes_the_samples_covered(dynamic, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert main(["search", str(dynamic), "--inputs", str(tmp_path / "seq"), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert culprits(data) == RMS_CULPRITS
    assert data["shapes"] == {"x": [{"dim": 1, "name": "seq", "covered": [8, 16]}]}
    printed = capsys.readouterr().out
    assert "verified on input shapes: x[1] (seq): 8..16" in printed and "warning" not in printed
    static = tmp_path / "static.json"
    assert main(["search", str(MODEL), "--inputs", str(SAMPLES / "transformer_block.npz"), "-o", str(static),
                 "-q"]) == 0
    assert json.loads(static.read_text())["shapes"] == {}  # no dynamic dimension


def test_a_maximum_no_sample_reaches_is_warned_and_recorded(dynamic, tmp_path, capsys):
    import jsonschema

    out = tmp_path / "o.json"
    assert main(["search", str(dynamic), "--inputs", str(tmp_path / "seq"), "-o", str(out),
                 "--min-shapes", "x:1x4x64", "--opt-shapes", "x:1x16x64", "--max-shapes", "x:1x64x64"]) == 0
    data = json.loads(out.read_text())
    assert data["shapes"] == {"x": [{"dim": 1, "name": "seq", "covered": [8, 16], "profile": [4, 16, 64]}]}
    schema = json.loads((SAMPLES.parent / "fp16bisect/artifacts/overrides.schema.json").read_text())
    jsonschema.validate(data, schema)
    printed = " ".join(capsys.readouterr().out.split())
    assert ("warning: no sample reaches the maximum of input 'x' dimension 1 (seq): --max-shapes says 64, the "
            "samples reach 16; an overflow that grows with it is untested") in printed
    assert main(["search", str(dynamic), "--inputs", str(tmp_path / "seq"), "-o", str(out), "-q",
                 "--min-shapes", "x:1x8x64", "--max-shapes", "x:1x16x64"]) == 0
    assert "warning" not in capsys.readouterr().out


@pytest.mark.parametrize("flags, said", [
    (["--max-shapes", "x:1x16"], "--min-shapes"),  # a max without a min
    (["--max-shapes", "x1x16x64"], "is not name:shape"),
    (["--max-shapes", "x:1xsixteenx64"], "is not whole numbers joined by x"),
    (["--min-shapes", "x:1x8x64", "--max-shapes", "y:1x16x64"], "input 'x' has --min-shapes but no --max-shapes"),
    (["--min-shapes", "z:1x8x64", "--max-shapes", "z:1x16x64"], "name input 'z', which the model does not have"),
    (["--min-shapes", "x:1x8", "--max-shapes", "x:1x16"], "has rank 3"),
    (["--min-shapes", "x:1x8x32", "--max-shapes", "x:1x16x32"], "has fixed dimension 2 = 64"),
    (["--min-shapes", "x:1x16x64", "--max-shapes", "x:1x8x64"], "need min <= opt <= max"),
    (["--min-shapes", "x:1x10x64", "--max-shapes", "x:1x32x64"], "outside the profile"),  # the seq-8 sample
])
def test_shape_flags_are_validated(dynamic, tmp_path, capsys, flags, said):
    assert main(["search", str(dynamic), "--inputs", str(tmp_path / "seq"), "-o", str(tmp_path / "o.json"),
                 *flags]) == 2
    assert said in error_line(capsys)
    assert not (tmp_path / "o.json").exists()


@pytest.mark.usefixtures("rtx", "engines_run_as_built")
def test_the_tensorrt_profile_is_the_deployment_one(dynamic, tmp_path, capsys, request):
    asked = request.getfixturevalue("configs")  # each configuration asked of Polygraphy (test_tensorrt's fixture)

    def profiles() -> list[dict]:  # each build's one optimization profile, as asked of Polygraphy
        return [{name: [list(s) for s in shapes] for name, shapes in c["profiles"][0].items()} for c in asked]

    out = tmp_path / "o.json"
    code = main(["search", str(dynamic), "--inputs", str(tmp_path / "seq"), "--backend", "tensorrt", "-o", str(out),
                 "-q", "--min-shapes", "x:1x4x64", "--opt-shapes", "x:1x16x64", "--max-shapes", "x:1x64x64"])
    assert code == 0, capsys.readouterr().err
    assert asked and all(p == {"x": [[1, 4, 64], [1, 16, 64], [1, 64, 64]]} for p in profiles())
    assert culprits(json.loads(out.read_text())) == RMS_CULPRITS
    asked.clear()
    code = main(["search", str(dynamic), "--inputs", str(tmp_path / "seq"), "--backend", "tensorrt", "-o",
                 str(tmp_path / "span.json"), "-q"])  # without the flags: the samples' span
    assert code == 0
    assert asked and all(p == {"x": [[1, 8, 64], [1, 8, 64], [1, 16, 64]]} for p in profiles())


def test_every_command_takes_a_directory_of_samples(tmp_path, capsys):
    samples_in(tmp_path / "data")
    data = str(tmp_path / "data")
    overrides = write_overrides(tmp_path)
    assert main(["scan", str(MODEL), "--inputs", data, "--json", str(tmp_path / "scan.json"), "-q"]) == 0
    assert main(["compare", str(MODEL), "--inputs", f"{data}/*.npz", "--overrides", str(overrides), "-q"]) == 0
    assert main(["check", str(MODEL), "--inputs", data, "--overrides", str(overrides), "-q"]) == 0
    assert main(["apply", str(overrides), str(MODEL), "-o", str(tmp_path / "mixed.onnx"), "--verify",
                 "--inputs", data, "-q"]) == 0
    manifest = tmp_path / "zoo.toml"
    manifest.write_text(f'[[entry]]\nmodel = "{MODEL}"\ninputs = "data/*.npz"\naction = "search"\n'
                        'backend = "emulate"\noutput = "found.json"\n')
    assert main(["batch", str(manifest), "--jobs", "1"]) == 0  # relative to the manifest, expanded there
    assert culprits(json.loads((tmp_path / "found.json").read_text())) == CULPRITS
    capsys.readouterr()


# -- the shape profile in the Python API and batch manifests: the flags' meaning and their one check

PROFILE = {"min_shapes": "x:1x4x64", "opt_shapes": "x:1x16x64", "max_shapes": "x:1x64x64"}
PROFILED = {"x": [{"dim": 1, "name": "seq", "covered": [8, 16], "profile": [4, 16, 64]}]}


def test_the_api_and_a_manifest_take_the_shape_profile_as_the_flags_do(dynamic, tmp_path, capsys):
    import fp16bisect
    from fp16bisect.cli.main import main as cli

    result = fp16bisect.search(dynamic, tmp_path / "seq", judge=PROFILE)
    assert sorted(n.name for n in result.fp32_nodes) == RMS_CULPRITS and result.to_dict()["shapes"] == PROFILED
    as_dicts = {"min_shapes": {"x": [1, 4, 64]}, "opt_shapes": {"x": "1x16x64"}, "max_shapes": {"x": (1, 64, 64)}}
    assert fp16bisect.search(dynamic, tmp_path / "seq", judge=as_dicts).to_dict()["shapes"] == PROFILED
    with pytest.raises(fp16bisect.UsageError, match="outside the profile"):  # the seq-8 sample
        fp16bisect.check(dynamic, tmp_path / "seq", judge={"min_shapes": "x:1x10x64", "max_shapes": "x:1x32x64"})
    manifest = tmp_path / "zoo.toml"
    manifest.write_text(f"""
        [[entry]]
        model = "{dynamic.name}"
        inputs = "seq"
        action = "search"
        min_shapes = "x:1x4x64"
        opt_shapes = "x:1x16x64"
        max_shapes = {{ x = [1, 64, 64] }}
    """.replace("\n        ", "\n"))
    assert cli(["batch", str(manifest), "--json", str(tmp_path / "batch.json"), "--jobs", "1"]) == 0
    entry, = json.loads((tmp_path / "batch.json").read_text())["entries"]
    assert sorted(entry["fp32_nodes"]) == RMS_CULPRITS and entry["result"]["shapes"] == PROFILED


@pytest.mark.parametrize("given", [
    {"max_shapes": "x:1x16"},  # a max without a min
    {"max_shapes": "x1x16x64"},
    {"min_shapes": "x:1x8x64", "max_shapes": "x:1xsixteenx64"},
    {"min_shapes": "x:1x8x64", "max_shapes": "y:1x16x64"},
    {"min_shapes": "x:1x16x64", "max_shapes": "x:1x8x64"},
    {"min_shapes": "z:1x8x64", "max_shapes": "z:1x16x64"},
])
def test_a_bad_profile_is_the_same_one_line_from_the_flags_the_api_and_a_manifest(dynamic, tmp_path, capsys,
                                                                                 given):
    import fp16bisect

    flags = [x for key, text in given.items() for x in ("--" + key.replace("_", "-"), text)]
    assert main(["search", str(dynamic), "--inputs", str(tmp_path / "seq"), "-q", *flags]) == 2
    said = error_line(capsys).removeprefix("fp16bisect: error: ")
    with pytest.raises(fp16bisect.UsageError) as api:
        fp16bisect.search(dynamic, tmp_path / "seq", judge=given)
    assert str(api.value) == said
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"entries": [{"model": str(dynamic), "inputs": "seq", **given}]}))
    code = main(["batch", str(manifest)])
    line = error_line(capsys)
    if "which the model does not have" in said:  # known only with the model: that entry fails alone
        assert code == 1
    else:  # the manifest is bad input: exit 2, nothing runs
        assert code == 2 and line == f"fp16bisect: error: manifest {str(manifest)!r}, entry 1: {said}"
