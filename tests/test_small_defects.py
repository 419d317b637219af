"""The smaller defects of issue 40 (item 7), one test or a few each, each written to fail on the code before its
fix: an override file naming a node that is not a candidate, the suite writing into the working tree, a journal
left by a run that evaluated nothing, a broken pipe, long reprs, a cut op-type list, compare's max_error."""

from __future__ import annotations

import csv
import json

import numpy as np
import onnx
import pytest
from conftest import LN, LN_IN, F, make_model, one_line_error, run
from onnx import TensorProto, helper
from real_models import PP_OCRV4_DET, real_model


def concat_model(tmp_path):
    """left = x*2 and right = x*3 (candidates) -> Concat 'concat' -> 'big' = *1e5 (overflows FP16) -> 'down' =
    *1e-5; 'moved' is a Transpose of the graph input alone, 'shape' (Shape) computes integers only. The all-FP16 plan
    fails (inf); {big, down} is the answer."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["l"], name="left"),
             helper.make_node("Mul", ["x", "three"], ["r"], name="right"),
             helper.make_node("Concat", ["l", "r"], ["c"], name="concat", axis=0),
             helper.make_node("Mul", ["c", "up"], ["b"], name="big"),
             helper.make_node("Mul", ["b", "tiny"], ["y"], name="down"),
             helper.make_node("Transpose", ["x"], ["xt"], name="moved"),
             helper.make_node("Shape", ["x"], ["s"], name="shape")]
    inits = {"two": np.array(2, np.float32), "three": np.array(3, np.float32), "up": np.array(1e5, np.float32),
             "tiny": np.array(1e-5, np.float32)}
    model = make_model(nodes, [("x", F, [4])], [("y", F, [8]), ("xt", F, [4]), ("s", TensorProto.INT64, [1])],
                       inits)
    path = tmp_path / "concat.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "x.npz", x=np.linspace(1, 2, 4, dtype=np.float32))
    return path, tmp_path / "x.npz"


def with_nodes(found: dict, graph_nodes: dict, *names: str) -> dict:
    """The override file ``found`` with ``names`` added to its fp32_nodes (as a hand-written or AutoCast-derived
    list may: any node of the model); ``graph_nodes``: node name -> (op type, outputs)."""
    data = json.loads(json.dumps(found))
    data["fp32_nodes"] += [{"name": n, "op_type": graph_nodes[n][0], "outputs": list(graph_nodes[n][1])}
                           for n in names]
    return data


def searched(capsys, tmp_path, model, inputs) -> tuple[dict, dict]:
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", model, "--inputs", inputs, "-o", out, "-q")
    assert code == 0, err
    nodes = {n.name: (n.op_type, tuple(n.output)) for n in onnx.load(model).graph.node}
    return json.loads(out.read_text()), nodes


def test_an_override_file_naming_a_transparent_node_keeps_its_producers_in_fp32(tmp_path, capsys):
    """A Concat in the file (not a candidate: it moves data and takes its producers' precision) was an internal
    KeyError (exit 4) in check and compare; apply pinned the Concat itself. Now each follows it to its producers,
    saying so in one line."""
    model, x = concat_model(tmp_path)
    found, nodes = searched(capsys, tmp_path, model, x)
    assert sorted(n["name"] for n in found["fp32_nodes"]) == ["big", "down"]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(with_nodes(found, nodes, "concat")))

    code, out, err = run(capsys, "check", model, "--inputs", x, "--overrides", edited, "--json", tmp_path / "c.json")
    assert code == 0, err
    said = [line for line in err.splitlines() if "'concat'" in line]
    assert len(said) == 1 and "'left', 'right'" in said[0] and "Traceback" not in err, err
    assert sorted(json.loads((tmp_path / "c.json").read_text())["overrides"]["nodes"]) == \
        ["big", "down", "left", "right"]

    code, out, err = run(capsys, "compare", model, "--inputs", x, "--overrides", edited, "--csv", tmp_path / "c.csv")
    assert code == 0, err
    assert len([line for line in err.splitlines() if "'concat'" in line]) == 1, err
    rows = list(csv.DictReader((tmp_path / "c.csv").read_text().splitlines()))
    assert {r["node"] for r in rows if r["fp32"] == "True"} == {"big", "down", "left", "right"}

    code, out, err = run(capsys, "apply", model, edited, "-o", tmp_path / "m.onnx")
    assert code == 0, err
    assert "'concat' -> 'left', 'right'" in " ".join(out.split()), out
    assert "4 pinned in FP32 (left, right, big, down)" in " ".join(out.split()), out


@pytest.mark.parametrize("node, why", [("shape", "has no float output"), ("moved", "no candidate")])
def test_an_override_file_naming_a_node_with_no_candidate_behind_it_is_refused_in_one_line(tmp_path, capsys, node,
                                                                                            why):
    """An integer-only node, or a Transpose of the graph input: nothing there for FP32 to keep; exit 2 in each
    command, one line naming the node."""
    model, x = concat_model(tmp_path)
    found, nodes = searched(capsys, tmp_path, model, x)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(with_nodes(found, nodes, node)))
    for argv in (["check", model, "--inputs", x, "--overrides", edited],
                 ["compare", model, "--inputs", x, "--overrides", edited],
                 ["apply", model, edited, "-o", tmp_path / "m.onnx"]):
        code, _, err = run(capsys, *argv)
        assert code == 2, (argv[0], err)
        line = one_line_error(err)
        assert f"'{node}'" in line and why in line, line
    assert not (tmp_path / "m.onnx").exists()


def test_pp_ocrv4_det_override_file_with_its_concat_is_checked_with_the_concat_producers(tmp_path, capsys):
    """PP-OCRv4's detector: p2o.Concat.0 joins three Resize outputs and an Add (all candidates)."""
    model = real_model(PP_OCRV4_DET)
    x = tmp_path / "x.npz"
    np.savez(x, x=np.random.default_rng(0).normal(size=(1, 3, 64, 64)).astype(np.float32))
    out = tmp_path / "o.json"
    assert run(capsys, "search", model, "--inputs", x, "--atol", "0.05", "-o", out, "-q")[0] == 0
    nodes = {n.name: (n.op_type, tuple(n.output)) for n in onnx.load(model, load_external_data=False).graph.node}
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(with_nodes(json.loads(out.read_text()), nodes, "p2o.Concat.0")))
    producers = {"nearest_interp_v2_3.tmp_0", "nearest_interp_v2_4.tmp_0", "nearest_interp_v2_5.tmp_0",
                 "p2o.Add.277"}
    ids = {n: name for name, (_, outs) in nodes.items() for n in outs}  # tensor -> its producer's node name
    code, _, err = run(capsys, "check", model, "--inputs", x, "--overrides", edited, "--json", tmp_path / "c.json")
    assert code == 0, err
    assert len([line for line in err.splitlines() if "p2o.Concat.0" in line]) == 1, err
    assert set(json.loads((tmp_path / "c.json").read_text())["overrides"]["nodes"]) >= {ids[t] for t in producers}


@pytest.mark.parametrize("flags", [["--keep-fp32", "nomatch"], ["--keep-fp16", "op:Nope"],
                                   ["--keep-fp32", "op:Erf", "--keep-fp16", "gelu_erf"]])
def test_a_usage_error_after_the_profile_leaves_no_journal(tmp_path, capsys, flags):
    """Refused after the FP32 profile (the constraints are resolved on it), a search that evaluated nothing left a
    journal holding its header alone beside -o."""
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "o.json", *flags)
    assert code == 2
    one_line_error(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_workers_that_cannot_take_the_search_leave_no_journal(tmp_path):
    """Refused while setting up its workers (an accept function that cannot be pickled, with jobs=2): no journal."""
    import fp16bisect

    with pytest.raises(fp16bisect.UsageError):
        fp16bisect.search(LN, LN_IN, output=tmp_path / "o.json", parallel=2,
                          tolerance={"accept": lambda got, expected: True})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, code", [
    (["search", LN, "--inputs", LN_IN, "-o", "{tmp}/o.json"], 0),
    (["scan", LN, "--inputs", LN_IN], 0),
    (["check", LN, "--inputs", LN_IN], 1),  # the check's own verdict: all FP16 fails the tolerance
    (["search", "--help"], 0),
])
def test_a_reader_that_closes_stdout_early_leaves_the_run_its_own_exit_code(tmp_path, argv, code):
    """``fp16bisect search ... | head -1`` exited 1 (the code of a failed check) on the broken pipe: rich's console
    exits 1 when stdout's reader has gone. The reader leaving is no failure of the run: its own code, no traceback,
    nothing more printed; the override JSON is written all the same."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = [str(a).replace("{tmp}", str(tmp_path)) for a in argv]
    with subprocess.Popen([sys.executable, "-m", "fp16bisect", *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=tmp_path, env=env) as process:
        process.stdout.close()  # the reader leaves before the first line (head -1, after it): every write fails
        err = process.stderr.read().decode()
    assert process.returncode == code, err
    assert "Traceback" not in err and "Exception ignored" not in err and "error" not in err, err
    if argv[0] == "search" and "-o" in argv:
        assert json.loads((tmp_path / "o.json").read_text())["fp32_nodes"]


REPR_CHARS = 300  # "a line or a few": what it is, the counts, the verdict


def short(result) -> str:
    text = repr(result)
    assert len(text) <= REPR_CHARS and text.count("\n") <= 2, f"{type(result).__name__}: {len(text)} chars: {text[:400]}"
    return text


@pytest.mark.parametrize("name", ["transformer_block", "cnn_batchnorm", "attention_unscaled", "log_underflow",
                                  "two_branches", "fp16_safe", "accumulation"])
def test_every_public_result_has_a_short_repr(tmp_path, name):
    """``repr`` of a compare result was 27 KB on the 41-node transformer block (every node's metrics)."""
    import fp16bisect
    from conftest import SAMPLES

    model, x = SAMPLES / f"{name}.onnx", SAMPLES / f"{name}.npz"
    found = fp16bisect.search(model, x, output=tmp_path / "o.json")
    short(found)
    short(fp16bisect.check(model, x, overrides=found))
    short(fp16bisect.scan(model, x))
    short(fp16bisect.apply(model, found, tmp_path / "m.onnx", verify=True, samples=x))
    compared = fp16bisect.compare(model, x)
    assert short(compared).startswith("CompareResult(")
    short(compared.first_failing)  # None when every node passes, else a NodeError
    pins = ",".join(f"{n}:fp32" for n in found.names) or f"{found.outcome.graph.candidates[0].id}:fp32"
    short(fp16bisect.migrate(model, tmp_path / "migrated.onnx", trtexec_args=f"--fp16 --layerPrecisions={pins}"))
    manifest = tmp_path / "batch.toml"
    manifest.write_text(f'[[entry]]\nmodel = "{model}"\ninputs = "{x}"\naction = "search"\noutput = '
                        f'"{tmp_path / "b.json"}"\n\n[[entry]]\nmodel = "{model}"\ninputs = "{x}"\naction = "check"\n')
    batch = fp16bisect.batch(manifest, jobs=1)
    short(batch)
    for row in batch.entries:
        short(row)


@pytest.mark.parametrize("flag", ["--keep-fp16", "--keep-fp32"])
def test_a_pattern_matching_nothing_says_how_many_op_types_it_does_not_list(tmp_path, capsys, flag):
    """The transformer block has 9 op types among its candidates; the refusal listed six and stopped."""
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "o.json", flag, "op:Nope")
    assert code == 2
    line = one_line_error(err)
    assert "(op types here: Add, Div, Erf, MatMul, Mul, ReduceMean and 3 more)" in line, line


@pytest.mark.parametrize("value", [-1, "x", float("nan"), float("inf"), True, [0.1]])
def test_compare_refuses_a_bad_max_error_in_the_api_and_the_cli_alike(capsys, value):
    """``fp16bisect.compare(model, x, max_error=-1)`` marked every node failing and ``max_error="x"`` raised a bare
    TypeError; only the command line refused them, with its own words. One check now: the API names the keyword,
    the command line the flag, the rest of the line the same."""
    import fp16bisect

    with pytest.raises(fp16bisect.UsageError) as refused:
        fp16bisect.compare(LN, LN_IN, max_error=value)
    said = str(refused.value)
    assert "\n" not in said and said.startswith("max_error "), said
    if isinstance(value, (str, float, int)) and not isinstance(value, bool):
        code, _, err = run(capsys, "compare", LN, "--inputs", LN_IN, "--max-error", str(value))
        assert code == 2 and one_line_error(err) == f"fp16bisect: error: --{said.replace('max_error', 'max-error', 1)}"


@pytest.mark.parametrize("value", [0.5, "0.25", 1])
def test_compare_takes_a_good_max_error(value):
    import fp16bisect

    found = fp16bisect.compare(LN, LN_IN, max_error=value)
    assert found.first_failing is not None and found.first_failing.node == "ln1_square"
