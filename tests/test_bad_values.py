"""Every bad value is refused the same way (issue 40 item 6): each field of each option record takes a value or
refuses it with ``fp16bisect.UsageError`` in one line, and every public function refuses a bad value of every
parameter with ``fp16bisect.Error``, never a ``TypeError``, ``ValueError`` or ``AttributeError`` (before:
``compare(max_error=-1)`` marked every node failing and ``compare(max_error="x")`` was a bare ``TypeError``)."""

from __future__ import annotations

import functools
import inspect
import json
import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp16bisect
from conftest import SAMPLES
from fp16bisect import GivenTolerance, Journaling, Judge, Parallel, Space, Strategy
from fp16bisect.run.options import BACKENDS

RECORDS = (Judge, Space, Strategy, Journaling, Parallel)
MODEL, X = str(SAMPLES / "fp16_safe.onnx"), str(SAMPLES / "fp16_safe.npz")
ANYTHING = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(), st.text(max_size=10),
                     st.lists(st.one_of(st.integers(), st.text(max_size=4)), max_size=3),
                     st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), st.builds(object))
SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def one_line(error: BaseException) -> bool:
    return bool(str(error)) and "\n" not in str(error)


@pytest.mark.parametrize("record, name", [(r, f.name) for r in (*RECORDS, GivenTolerance) for f in fields(r)],
                         ids=lambda x: x if isinstance(x, str) else x.__name__)
@settings(max_examples=40, deadline=None)
@given(value=ANYTHING)
def test_a_field_takes_a_value_or_refuses_it_in_one_line(record, name, value):
    try:
        made = record(**{name: value})
    except fp16bisect.UsageError as exc:
        assert one_line(exc), str(exc)
        return
    if record is not GivenTolerance:  # a value taken is stored checked: given again, the same record
        assert record(**{name: getattr(made, name)}) == made


# values each field must refuse: wrong types, out of range, unknown names
REFUSED = {
    Judge: {"backend": ["gpu", 5, None], "check": [5], "keep_plans": ["yes", 1], "typing": ["fast", None],
            "opt_level": [9, -1, "x", 2.5, True], "timing_cache": [5], "max_shapes": [5, "x1x2"],
            "min_shapes": [5], "opt_shapes": [[1, 2]], "noise_ok": [1], "repeats": [0, "x", 1.5],
            "strict_environment": ["no"]},
    Space: {"precision": ["fp8", 5], "accumulate": ["fp8", 16], "headroom": [1, 0.5, "x", math.nan, True],
            "keep_fp32": ["(", 5, [""]], "keep_fp16": [[5]], "group_by": ["x", 5, "scope:0"]},
    Strategy: {"prior": ["maybe", None], "minimum": [-1, 1.5, "x"], "objective": ["time", 1],
               "max_evaluations": [0, -1, "x", 1.5, True], "time_limit": [0, -1, "x", "m", "", math.nan, True]},
    Journaling: {"restart": ["yes"], "keep_journal": [None], "retry_crashed": [0]},
    Parallel: {"jobs": [0, "x", 1.5, True], "devices": [5, "0,0", [True]], "ray": [5]},
    GivenTolerance: {"atol": [-1, "x", math.inf, object(), {"y": -1}], "rtol": [math.nan], "min_cosine": [2],
                     "max_mismatch": [2], "error_stat": ["p101", "worst"], "argmax": [1.5], "topk": ["o", "o:0"],
                     "accept": [3], "per_output": [5, {"y": 5}]},
}


def test_every_field_has_values_it_refuses_and_refuses_them_in_one_line():
    for record, bad in REFUSED.items():
        assert set(bad) == {f.name for f in fields(record)}, record  # a new field: say what it refuses
        for name, values in bad.items():
            for value in values:
                with pytest.raises(fp16bisect.UsageError) as raised:
                    record(**{name: value})
                said = str(raised.value)  # naming the field (or its flag, as the shape profile's checks do)
                assert one_line(raised.value) and (name in said or name.replace("_", "-") in said), (record, said)


def bad_record(record) -> st.SearchStrategy:
    """What a function's record parameter must refuse: a field's bad value, a key the record lacks, a type it is
    not (and, for its shorthand, a value the shorthand field refuses)."""
    refused = [{name: v} for name, values in REFUSED[record].items() for v in values]
    names = {f.name for f in fields(record)}
    forms = [st.sampled_from(refused), st.dictionaries(st.text(min_size=1, max_size=6).filter(lambda k: k not in names),
                                                       st.integers(), min_size=1, max_size=2),
             st.floats(), st.lists(st.integers(), max_size=2), st.builds(object)]
    if record is Judge:
        forms.append(st.text(max_size=8).filter(lambda t: t not in BACKENDS))
    elif record is Space:
        forms.append(st.text(max_size=6).filter(lambda t: t.lower() not in ("fp16", "bf16")))
    elif record is Parallel:
        forms.append(st.integers(max_value=0))
    else:
        forms.append(st.text(max_size=6))
    return st.one_of(*forms)


BAD_TOLERANCE = st.one_of(bad_record(GivenTolerance), st.integers())
MODELS = st.sampled_from([5, 1.5, object(), "missing.onnx", b"model"])
SAMPLE_SETS = st.sampled_from([5, [], [5], "missing.npz", {"wrong": np.zeros(3, np.float32)}, b"x", 1.5])
PROGRESS = st.sampled_from([5, "print", 1.5, object()])
PATHS = st.sampled_from([5, 1.5, object(), [1]])
SWITCHES = st.sampled_from(["x", 5, None, 1.5])
COMMON = {"model": MODELS, "samples": SAMPLE_SETS, "reference": SAMPLE_SETS.filter(lambda v: v != []),
          "progress": PROGRESS, "tolerance": BAD_TOLERANCE}
BAD = {
    "search": {**COMMON, "judge": bad_record(Judge), "space": bad_record(Space), "strategy": bad_record(Strategy),
               "parallel": bad_record(Parallel), "journal": bad_record(Journaling), "output": PATHS},
    "check": {**COMMON, "judge": bad_record(Judge) | st.just({"noise_ok": True}),
              "space": bad_record(Space) | st.sampled_from([{"keep_fp32": "relu"}, {"group_by": "scope"}]),
              "parallel": bad_record(Parallel),
              "overrides": st.sampled_from([5, "missing.json", {"schema": "x"}, [1]])},
    "compare": {**COMMON, "space": bad_record(Space) | st.just({"headroom": 4}),
                "overrides": st.sampled_from([5, "missing.json", {"schema": "x"}]),
                "max_error": st.sampled_from([-1, "x", math.nan, math.inf, True, [1], -0.5])},
    "scan": {"model": MODELS, "samples": SAMPLE_SETS, "progress": PROGRESS,
             "precision": st.sampled_from(["fp8", 5, 1.5, "x"])},
    "apply": {**COMMON, "overrides": st.sampled_from([None, 5, "missing.json"]),
              "output": st.sampled_from([5, None, "m.json", object()]), "verify": SWITCHES,
              "space": bad_record(Space) | st.sampled_from([{"headroom": 4}, {"keep_fp32": ["relu"]}]),
              "fp16_io": SWITCHES, "force": SWITCHES, "keep_fp32": st.sampled_from([5, [5], ["no_such_node"]]),
              "shown": st.sampled_from([5, "x"])},
    "migrate": {**COMMON, "model": st.sampled_from([5, "missing.onnx", object()]),
                "output": st.sampled_from([5, "g.json", None]),
                "trtexec_args": st.sampled_from([5, ["--fp16"], "--layerPrecisions=no_such_layer:fp32"]),
                "layer_precisions": st.sampled_from([5, "missing.txt"]), "overrides_out": PATHS,
                "verify": st.sampled_from(["x", 5, None]), "fp16_io": SWITCHES, "shown": st.sampled_from([5, "x"])},
    "batch": {"manifest": st.sampled_from([5, "missing.toml", None, object()]),
              "jobs": st.sampled_from([0, "x", 1.5, True, -2]), "ray": st.sampled_from([5, 1.5]),
              "progress": PROGRESS},
    "write_report": {"result": st.sampled_from([5, None, "x"]), "path": PATHS | st.just(None),
                     "next_steps": st.sampled_from([5, [5], [("a",)], "x"]), "progress": PROGRESS},
}


@functools.lru_cache(maxsize=1)
def searched() -> dict:
    return fp16bisect.search(MODEL, X).to_dict()


@functools.lru_cache(maxsize=1)
def checked() -> fp16bisect.CheckResult:
    return fp16bisect.check(MODEL, X)


def valid(function: str, parameter: str, tmp_path) -> dict:
    """Every parameter of ``function`` given a value it takes (beside ``parameter``, which the test sets)."""
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"entries": [{"model": MODEL, "inputs": X, "backend": "emulate"}]}))
    base = {"search": {"model": MODEL, "samples": X}, "check": {"model": MODEL, "samples": X},
            "compare": {"model": MODEL, "samples": X}, "scan": {"model": MODEL, "samples": X},
            "apply": {"model": MODEL, "overrides": searched(), "output": str(tmp_path / "m.onnx"), "verify": True,
                      "samples": X},
            "migrate": {"model": MODEL, "output": str(tmp_path / "g.onnx"), "verify": True, "samples": X,
                        "trtexec_args": "--fp16 --layerPrecisions=layernorm:fp32"},
            "batch": {"manifest": str(manifest), "jobs": 1},
            "write_report": {"result": checked(), "path": str(tmp_path / "r.html")}}[function]
    if (function, parameter) == ("migrate", "layer_precisions"):  # one of the two, not both
        del base["trtexec_args"]
    return base


def test_the_valid_calls_run(tmp_path):
    """The calls the property varies one parameter of run as they are: what refuses a value is that value."""
    for function in BAD:
        result = getattr(fp16bisect, function)(**valid(function, "", tmp_path))
        assert result is not None, function


def test_every_parameter_of_every_public_function_has_its_bad_values():
    for function, bad in BAD.items():
        assert set(inspect.signature(getattr(fp16bisect, function)).parameters) == set(bad), function


@pytest.mark.parametrize("function, parameter", [(f, p) for f, bad in BAD.items() for p in bad])
@SLOW
@given(data=st.data())
def test_every_public_function_refuses_a_bad_value_of_every_parameter_in_one_line(function, parameter, data,
                                                                                   tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    value = data.draw(BAD[function][parameter], label=parameter)
    with pytest.raises(fp16bisect.Error) as raised:
        getattr(fp16bisect, function)(**{**valid(function, parameter, tmp_path), parameter: value})
    assert one_line(raised.value), str(raised.value)


def test_compare_refuses_a_negative_or_non_numeric_max_error_naming_it(capsys):
    from fp16bisect.cli.main import main

    for value, said in ((-1, "max_error -1: give a finite number of at least 0"),
                        ("x", "max_error x: give a finite number of at least 0")):
        with pytest.raises(fp16bisect.UsageError) as raised:
            fp16bisect.compare(MODEL, X, max_error=value)
        assert str(raised.value).startswith(said)
        assert main(["compare", MODEL, "--inputs", X, "--max-error", str(value), "-q"]) == 2
        assert capsys.readouterr().err.startswith("fp16bisect: error: --" + said.replace("max_error", "max-error"))
