"""One option, one field (issue 40 item 2): every flag of ``search`` and ``check`` is a field of one option record
(or of the tolerance), a batch manifest's key and a path of the Python API, with one default; the flags, the
manifest keys and the API's records are generated from the fields, so a field added to a record is a flag, a
manifest key and an API field with no other edit."""

from __future__ import annotations

import argparse
import inspect
import json
import re
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import pytest

import fp16bisect
from conftest import SAMPLES
from fp16bisect import records
from fp16bisect.api import functions, manifest
from fp16bisect.cli.args import option_groups, parsed
from fp16bisect.cli.main import build_parser, main
from fp16bisect.records import CHECK, SEARCH, option
from fp16bisect.run.options import CheckOptions, SearchOptions, Strategy
from fp16bisect.tolerance import GivenTolerance, Tolerance

OPTIONS = {SEARCH: SearchOptions, CHECK: CheckOptions}
# what a command takes that is no option of a run: its samples, the files it writes, -q (the API's own parameters,
# a manifest entry's own keys)
NOT_OPTIONS = {SEARCH: {"help", "inputs", "reference", "output", "report", "quiet", "check_minimal"},
               CHECK: {"help", "inputs", "reference", "overrides", "json", "report", "quiet"}}
MODEL, X = str(SAMPLES / "transformer_block.onnx"), str(SAMPLES / "transformer_block.npz")


def parser_of(command: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]


def flags_of(command: str) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser_of(command)._actions if a.option_strings and a.dest not in NOT_OPTIONS[command]}


def record_of(options, part: str):
    return GivenTolerance if part == "tolerance" else options.RECORDS[part]


def stated(value) -> str | None:
    """A default as the help should say it, written here apart from the code that renders it."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return f"{value:g}"
    return None if value is None or value == () else str(value)


@pytest.mark.parametrize("command", [SEARCH, CHECK])
def test_every_flag_is_one_field_a_manifest_key_and_an_api_path_with_one_default(command):
    options = OPTIONS[command]
    flags, keys = flags_of(command), options.keys(command)
    assert set(flags) == set(keys) - {"accept"}, "a flag without a field, or a field without a flag"
    api = inspect.signature(getattr(fp16bisect, command)).parameters
    for name, action in flags.items():
        part = keys[name]
        field = next(f for f in fields(record_of(options, part)) if f.name == name)
        flag = records.flag_of(field)
        assert flag is not None and action.option_strings[0] == "--" + name.replace("_", "-")
        assert part in api and api[part].default is None  # fp16bisect.search(..., judge={"opt_level": 3})
        assert action.default == field.default, name  # argparse's default is the record's
        assert "default" not in flag.help, f"{name}: the help says its default from the field's, never by hand"
        said = re.search(r"\(default:? (.*)\)$", action.help or "")
        default = getattr(Tolerance(), name) if part == "tolerance" else field.default
        if flag.from_file and command == CHECK:  # the file's, else what a search's default is
            assert said and said.group(1).startswith("the override file's"), action.help
            assert said.group(1).endswith(f"else {stated(default) or flag.unset}") or \
                not (stated(default) or flag.unset), action.help
        elif stated(default) or flag.unset:
            assert said and said.group(1) == (stated(default) or flag.unset), action.help
        else:
            assert said is None, action.help
        if part == "parallel":  # entries run serially; the batch's --jobs and --ray run them at once
            assert name in manifest.BATCH_OWN
        else:
            assert name in manifest.option_keys(command)


def test_every_field_of_every_record_has_a_flag_and_a_check_and_an_immutable_default():
    for options in OPTIONS.values():
        for record in options.RECORDS.values():
            for f in fields(record):
                assert records.flag_of(f) is not None and f.metadata.get("check") is not None, f"{record}.{f.name}"
                assert f.default is not MISSING and not isinstance(f.default, (list, dict, set))


@pytest.mark.parametrize("command", [SEARCH, CHECK])
def test_no_flag_given_is_every_record_s_default(command):
    args = parser_of(command).parse_args([MODEL, "--inputs", X])
    made = parsed(option_groups(OPTIONS[command], command), args)
    assert made["tolerance"] == GivenTolerance()
    assert all(made[part] == record() for part, record in OPTIONS[command].RECORDS.items())


# (flags, a manifest entry's keys, the API's keywords): each the same search
SAME = [
    (["--backend", "command", "--check", "judge.sh {model}", "--keep-plans"],
     {"backend": "command", "check": "judge.sh {model}", "keep_plans": True},
     {"judge": {"backend": "command", "check": "judge.sh {model}", "keep_plans": True}}),
    (["--backend", "tensorrt", "--typing", "weak", "--opt-level", "2", "--repeats", "3", "--noise-ok"],
     {"backend": "tensorrt", "typing": "weak", "opt_level": 2, "repeats": 3, "noise_ok": True},
     {"judge": fp16bisect.Judge("tensorrt", typing="weak", opt_level=2, repeats=3, noise_ok=True)}),
    (["--prior", "none", "--minimum", "--objective", "cost"],
     {"prior": "none", "minimum": True, "objective": "cost"},
     {"strategy": {"prior": "none", "minimum": "auto", "objective": "cost"}}),
    (["--precision", "bf16", "--headroom", "4", "--keep-fp32", "ln1_var", "--keep-fp32", "op:Softmax"],
     {"precision": "bf16", "headroom": 4, "keep_fp32": ["ln1_var", "op:Softmax"]},
     {"space": {"precision": "bf16", "headroom": 4.0, "keep_fp32": ("ln1_var", "op:Softmax")}}),
    (["--atol", "y:0.1", "--atol", "0.05", "--error-stat", "p99"],
     {"atol": ["y:0.1", "0.05"], "error_stat": "p99"},
     {"tolerance": {"atol": {"y": 0.1, None: 0.05}, "error_stat": "p99"}}),
    (["--restart", "--keep-journal", "--retry-crashed"],
     {"restart": True, "keep_journal": True, "retry_crashed": True},
     {"journal": fp16bisect.Journaling(restart=True, keep_journal=True, retry_crashed=True)}),
    (["--min-shapes", "x:1x4", "--max-shapes", "x:1x8"], {"min_shapes": "x:1x4", "max_shapes": {"x": [1, 8]}},
     {"judge": {"min_shapes": {"x": (1, 4)}, "max_shapes": "x:1x8"}}),
]


def api_options(monkeypatch, **keywords) -> SearchOptions:
    """The options ``fp16bisect.search`` runs with (the search itself not run)."""
    seen = []
    monkeypatch.setattr(functions, "run_search", lambda model, samples, options, **_: seen.append(options) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        fp16bisect.search(MODEL, X, output="o.json", **keywords)
    return seen[0]


@pytest.mark.parametrize("flags, keys, keywords", SAME)
def test_a_flag_a_manifest_key_and_an_api_keyword_make_the_same_search(flags, keys, keywords, monkeypatch, tmp_path):
    args = parser_of(SEARCH).parse_args([MODEL, "--inputs", X, *flags])
    with records.spelled_as_flags():
        flagged = SearchOptions(**parsed(option_groups(SearchOptions, SEARCH), args), output="o.json")
    entry = manifest.entry_of({"model": MODEL, "inputs": X, "action": "search", "output": "o.json", **keys}, 1,
                              Path("."), "m.toml")
    assert entry.options == flagged
    assert api_options(monkeypatch, **keywords) == flagged
    assert flagged != SearchOptions(output="o.json")  # each case gives something


# -- a new option is one field: the issue-41 budget, as a record with one more field


@dataclass(frozen=True)
class Budgeted(Strategy):
    max_evaluations: int | None = option(None, records.whole(1, optional=True, what="a number of evaluations"),
                                         "stop after N evaluations", metavar="N", commands=(SEARCH,), unset="none")


def test_a_field_added_to_a_record_is_a_flag_a_manifest_key_and_an_api_field_with_no_other_edit(monkeypatch,
                                                                                                 tmp_path, capsys):
    monkeypatch.setitem(SearchOptions.RECORDS, "strategy", Budgeted)
    monkeypatch.setenv("COLUMNS", "120")
    search_help = parser_of(SEARCH).format_help()
    assert re.search(r"\n  --max-evaluations N +stop after N evaluations \(default none\)\n", search_help)
    assert "--max-evaluations" not in parser_of(CHECK).format_help()  # a search's option
    args = parser_of(SEARCH).parse_args([MODEL, "--inputs", X, "--max-evaluations", "7"])
    flagged = SearchOptions(**parsed(option_groups(SearchOptions, SEARCH), args))
    assert flagged.strategy == Budgeted(max_evaluations=7)
    assert main(["search", MODEL, "--inputs", X, "--max-evaluations", "0", "-o", str(tmp_path / "o.json")]) == 2
    assert capsys.readouterr().err == "fp16bisect: error: --max-evaluations 0: give a number of evaluations 1 or more\n"
    entry = {"model": MODEL, "inputs": X, "action": "search", "max_evaluations": 7}
    assert manifest.entry_of(entry, 1, tmp_path, "m.toml").options.strategy == Budgeted(max_evaluations=7)
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"entries": [{**entry, "max_evaluations": "many"}]}))
    with pytest.raises(fp16bisect.UsageError, match=r"entry 1: max_evaluations many: give a number of evaluations"):
        fp16bisect.batch(bad)
    assert api_options(monkeypatch, strategy={"max_evaluations": 7}).strategy == Budgeted(max_evaluations=7)
    with pytest.raises(fp16bisect.UsageError, match=r"max_evaluations 0: give"):
        fp16bisect.search(MODEL, X, strategy={"max_evaluations": 0})


def test_the_documented_manifest_of_a_command_judged_zoo_reads_as_its_flags_would():
    """docs/commands/batch.md's command-judged manifest: the judge's command for both entries (from defaults), a
    check's strict_environment, a search's objective, minimum and repeats (before: no command backend, no
    objective, no repeats in a manifest)."""
    path = Path(__file__).resolve().parents[1] / "docs" / "commands" / "batch-command.toml"
    check, search = manifest.read_manifest(str(path))
    judge = {"backend": "command", "check": "python judge.py {model} {inputs}"}
    assert check.options == CheckOptions.given(judge={**judge, "strict_environment": True},
                                               plans=str(path.parent / "entry-1.plans"))
    assert check.overrides == str(path.parent / "zoo" / "detector.overrides.json")
    assert search.options == SearchOptions.given(judge={**judge, "repeats": 2},
                                                 strategy={"objective": "cost", "minimum": "auto"},
                                                 output=str(path.parent / "classifier.overrides.json"))
