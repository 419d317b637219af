"""The override file: round trip, model hash, export quoting."""

import json
import re

import pytest
from conftest import F, make_model
from onnx import helper

from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.artifacts.exports import autocast_export, trtexec_export
from fp16bisect.artifacts.files import write_json
from fp16bisect.artifacts.overrides import read


def graph():
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("Add", ["a", "x"], ["b"], name="add_eps"),
        helper.make_node("Mul", ["b", "b"], ["c"]),  # unnamed
        helper.make_node("Relu", ["c"], ["y"], name="layers.0/attn:qk"),
    ]
    return Graph(make_model(nodes, [("x", F, [2])], [("y", F, [2])]))


def test_autocast_patterns_are_escaped_and_anchored():
    g = graph()
    export = autocast_export(g, [g.by_id["add"], g.by_id["layers.0/attn:qk"], g.by_id["c"]])
    pats = export["nodes_to_exclude"]
    assert pats == ["^add$", "^" + re.escape("layers.0/attn:qk") + "$"]
    assert re.match(pats[0], "add") and not re.match(pats[0], "add_eps")  # the AutoCast prefix trap
    assert any("'c' has no name" in w for w in export["warnings"])


def test_trtexec_names_unnamed_nodes_as_the_onnx_parser_does():
    g = graph()
    export = trtexec_export(g, [g.by_id["c"], g.by_id["add"]])
    assert "--layerPrecisions=node_of_c:fp32,add:fp32" in export["args"]
    assert "--layerOutputTypes=node_of_c:fp32,add:fp32" in export["args"]


def test_round_trip_and_hash_check(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model bytes")
    import hashlib

    data = {
        "schema": "fp16bisect.overrides/1",
        "model": {"path": str(model), "sha256": hashlib.sha256(b"model bytes").hexdigest()},
        "backend": {"name": "emulate", "versions": {}},
        "tolerance": {"atol": 0.01, "rtol": 0.01},
        "fp32_nodes": [{"name": "add", "op_type": "Add", "outputs": ["a"]}],
        "search": {"evaluations": 3, "minimal": True, "seconds": 0.1},
        "metrics": {"fp16": {}, "with_overrides": {}},
        "exports": {},
    }
    path = tmp_path / "o.json"
    write_json(path, data)
    assert read(path, model).to_json() == data
    assert not list(tmp_path.glob(".o.json.*"))  # no temp file left behind
    other = tmp_path / "other.onnx"
    other.write_bytes(b"retrained model")
    with pytest.raises(UsageError, match="another model"):
        read(path, other)
    assert read(path, other, force=True).to_json() == data


def test_write_refuses_nan_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "o.json"
    write_json(path, {"a": 1})
    with pytest.raises(ValueError):
        write_json(path, {"a": float("nan")})
    assert json.loads(path.read_text()) == {"a": 1}
    assert not list(tmp_path.glob(".o.json.*"))


@pytest.mark.parametrize("text", ["", "{", "[]", '{"schema": "other"}', '{"schema": "fp16bisect.overrides/1"}'])
def test_read_rejects_what_is_not_an_override_file(tmp_path, text):
    path = tmp_path / "o.json"
    path.write_text(text)
    with pytest.raises(UsageError):
        read(path)


def test_written_files_get_ordinary_permissions(tmp_path):
    import os
    import stat

    from fp16bisect.artifacts.files import write_atomic

    write_atomic(tmp_path / "f.json", b"{}")
    mode = stat.S_IMODE(os.stat(tmp_path / "f.json").st_mode)
    mask = os.umask(0)
    os.umask(mask)
    assert mode == 0o666 & ~mask


# -- the declared schema (fp16bisect/artifacts/overrides.schema.json)


def test_the_schema_is_draft_2020_12_and_ships_in_the_package():
    from importlib import resources

    from jsonschema import Draft202012Validator

    from fp16bisect.artifacts.overrides import SCHEMA, schema

    shipped = json.loads(resources.files("fp16bisect.artifacts").joinpath("overrides.schema.json").read_text())
    assert shipped == schema() and shipped["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(shipped)
    assert shipped["properties"]["schema"]["const"] == SCHEMA


def test_the_schema_requires_the_sections_the_builder_always_writes():
    """A plan's file (what the command backend writes) holds exactly the required sections; a search's result
    holds every section the schema declares, in the schema's order; both validate."""
    from fp16bisect.artifacts.override_json import SECTIONS, overrides_file
    from fp16bisect.artifacts.overrides import problems, schema

    g = graph()
    plan = overrides_file(g, {"add": ""}, backend={"name": "command"}, tolerance={"atol": 0.01, "rtol": 0.01},
                          search={"status": "plan", "plan": "0" * 12, "repeat": 0}, metrics={})
    assert list(plan.to_json()) == schema()["required"]
    assert list(schema()["properties"]) == list(SECTIONS)
    assert problems(plan.to_json()) == ""
    with pytest.raises(ValueError, match="not a section"):
        overrides_file(g, {}, backend={}, tolerance={}, search={}, metrics={}, more={"extra": 1})


def test_a_search_result_validates_and_has_every_section(tmp_path, capsys):
    from conftest import LN, LN_IN, run

    from fp16bisect.artifacts.override_json import SECTIONS
    from fp16bisect.artifacts.overrides import problems

    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q")
    assert code == 0, err
    data = json.loads(out.read_text())
    # only with search --keep-fp32/--keep-fp16, --group-by (tests/test_steer.py); when all-FP16 fails by rounding
    # (tests/test_rounding.py)
    optional = ("constraints", "blocks", "diagnosis")
    assert list(data) == [k for k in SECTIONS if k not in optional] and problems(data) == ""


@pytest.mark.parametrize("where, value, words", [
    (("search", "evaluations"), "4", ("invalid 'search'", "evaluations '4' is not a whole number")),
    (("fp32_nodes", 0, "outputs"), "ln1_sq", ("invalid 'fp32_nodes'", "[0].outputs 'ln1_sq' is not a list")),
    (("fp32_nodes", 0, "name"), 3, ("invalid 'fp32_nodes'", "[0].name 3 is not the node id")),
    (("exports", "trtexec", "args"), 5, ("invalid 'exports'", "trtexec.args 5 is not a list of strings")),
    (("metrics", "with_overrides"), [], ("invalid 'metrics'", "with_overrides a list is not null, or an object")),
    (("backend",), "emulate", ("'backend' must be an object", "not 'emulate'")),
    (("tolerance", "max_mismatch"), float("inf"), ("invalid 'tolerance'", "max_mismatch inf is not a number")),
])
def test_a_file_with_a_wrong_type_is_refused_in_one_line_naming_the_key(tmp_path, capsys, where, value, words):
    from conftest import LN, LN_IN, one_line_error, run

    out = tmp_path / "o.json"
    assert run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q")[0] == 0
    data = json.loads(out.read_text())
    inner = data
    for key in where[:-1]:
        inner = inner[key]
    inner[where[-1]] = value
    out.write_text(json.dumps(data))  # json writes inf as Infinity, which Python reads back
    code, _, err = run(capsys, "apply", out, LN, "-o", tmp_path / "m.onnx")
    assert code == 2
    line = one_line_error(err)
    for word in (*words, "run 'fp16bisect search' again"):
        assert word in line, (word, line)
    assert not (tmp_path / "m.onnx").exists()


# -- the file's one type (artifacts/overrides.py Overrides): read and written through it

def test_a_search_result_round_trips_through_the_type_unchanged(tmp_path, capsys):
    """write -> read -> write is byte-identical; the typed fields are what the file says."""
    from conftest import LN, LN_IN, run

    from fp16bisect.artifacts.overrides import Node, Pinned
    from fp16bisect.tolerance import Tolerance

    out, again = tmp_path / "o.json", tmp_path / "again.json"
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q", "--atol", "0.02")
    assert code == 0, err
    overrides = read(out)
    write_json(again, overrides.to_json())
    assert again.read_bytes() == out.read_bytes()
    data = json.loads(out.read_text())
    assert overrides.model_path == data["model"]["path"] and overrides.model_sha256 == data["model"]["sha256"]
    assert overrides.tolerance == Tolerance(0.02, 0.01) and overrides.precision == "fp16"
    assert overrides.pinned[0] == Pinned(Node("ln1_square", "Mul", ("ln1_sq",)), data["fp32_nodes"][0]["fp32_profile"])
    assert overrides.names == ["ln1_square", "ln1_var"] and overrides.search["evaluations"] == 4
    changed = overrides.replaced(environment={"backend": "emulate"})
    assert changed.environment == {"backend": "emulate"} and list(changed.to_json()) == list(data)
    assert overrides.environment == data["environment"]  # the record itself is not changed


def test_a_file_that_fails_the_schema_is_one_usage_line(tmp_path, capsys):
    """Read through the type: a file the schema refuses is a UsageError of one line naming the key; check and
    apply exit 2 with that line, no traceback."""
    from conftest import LN, LN_IN, run

    from fp16bisect.artifacts.overrides import Overrides

    out = tmp_path / "o.json"
    assert run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q")[0] == 0
    data = json.loads(out.read_text())
    data["fp32_nodes"][1]["outputs"] = "ln1_var_out"  # a string, not a list
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(UsageError) as caught:
        read(bad)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(repr(str(bad)) + " has an invalid 'fp32_nodes'")
    assert "[1].outputs 'ln1_var_out' is not a list" in message
    with pytest.raises(UsageError, match="^the override data has an invalid 'fp32_nodes'"):
        Overrides.from_json(data)
    for command in (["check", LN, "--inputs", LN_IN, "--overrides", bad], ["apply", LN, bad, "-o", tmp_path / "m.onnx"]):
        code, stdout, err = run(capsys, *command)
        assert code == 2 and "Traceback" not in err and f"{bad}" in err and "'fp32_nodes'" in err
