"""Reads an override file (schema ``fp16bisect.overrides/1``): validated against its declared JSON Schema.

The file is a public interface that build pipelines read; ``overrides.schema.json`` beside this module
declares it (keys, types, ranges), ``artifacts/override_json.py`` builds it, and this module refuses, with one
line naming the key and what is wrong, any file that does not match (``jsonschema``, draft 2020-12). Sections:

    schema      "fp16bisect.overrides/1"
    model       {path, sha256}
    backend     {name, versions, ...what the backend says of itself}
    tolerance   {atol, rtol, min_cosine, max_mismatch}
    fp32_nodes  [{name, op_type, outputs, fp32_profile}]   name = fp16bisect node id
    search      {status, candidates, evaluations, minimal, minimality, verified, contradictions, seconds,
                 trace, build_failures: [{fp32: [node ids], error: the backend's message}], journal, ...}
    prior       the emulator's search the search started from (a search's result only), or null
    metrics     {fp32, fp16, fp16_backend, with_overrides}: output -> worst metrics over samples
    skipped_nodes, notes, conversions   what the search did not cover, and constants FP16 cannot hold
    exports     {strongly_typed: {tensorrt, command, trtexec}, trtexec: {...}, modelopt_autocast: {...}}
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from importlib import resources
from pathlib import Path

from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.tolerance import Tolerance

SCHEMA = "fp16bisect.overrides/1"
AGAIN = "run 'fp16bisect search' again to write a new one"


@functools.cache
def schema() -> dict:
    """The declared JSON Schema of the file (``overrides.schema.json``, shipped in the package)."""
    return json.loads(resources.files(__package__).joinpath("overrides.schema.json").read_text(encoding="utf-8"))


@functools.cache
def _validator():
    """Draft 2020-12, where a number is finite: Python's json reads NaN and Infinity, which JSON does not have."""
    from jsonschema import Draft202012Validator, validators

    def finite_number(checker, instance) -> bool:
        return Draft202012Validator.TYPE_CHECKER.is_type(instance, "number") and math.isfinite(instance)

    checker = Draft202012Validator.TYPE_CHECKER.redefine("number", finite_number)
    return validators.extend(Draft202012Validator, type_checker=checker)(schema())


def read(path: str | Path, model_path: str | Path | None = None, force: bool = False,
         graph: Graph | None = None) -> dict:
    """Read and validate an override file; refuse one made for another model unless ``force``.

    With ``graph``, also refuse (whatever ``force``) a file none of whose nodes is in that model: see
    ``refuse_foreign``."""
    path = Path(path)
    data = _load(path)
    problem = problems(data)
    if problem:
        raise UsageError(f"{str(path)!r} {problem}")
    if graph is not None:
        refuse_foreign(data, path, graph)
    if model_path is not None and not force:
        digest = graph.sha256 if graph is not None and graph.sha256 else \
            hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
        if digest != data["model"].get("sha256"):
            raise UsageError(
                f"{str(path)!r} was made for another model (sha256 {str(data['model'].get('sha256'))[:12]}..., "
                f"this one is {digest[:12]}...): rerun 'fp16bisect search' on this model, or pass --force"
            )
    return data


def _load(path: Path):
    """The file's JSON, or a one-line refusal saying why there is none."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"override file {str(path)!r} not found: run 'fp16bisect search' to make one") from None
    except IsADirectoryError:
        raise UsageError(f"override file {str(path)!r} is a directory: pass the JSON 'fp16bisect search' wrote") \
            from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{str(path)!r} is not an override file (not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at "
            f"position {exc.start}): {AGAIN}"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{str(path)!r} is not an override file ({exc}): {AGAIN}") from None
    except RecursionError:
        raise UsageError(f"{str(path)!r} is not an override file (JSON nested too deeply): {AGAIN}") from None


def problems(data) -> str:
    """What makes ``data`` not an override file by the declared schema, as the end of one line that follows the
    file's name ('' when it is one): the first problem, naming the key, what it must be, and the fix."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return f"is not an fp16bisect override file (schema {SCHEMA!r} expected)"
    errors = list(_validator().iter_errors(data))
    if not errors:
        return ""
    required = schema()["required"]
    missing = [key for key in required if key not in data]
    if missing:
        return f"lacks key(s) {', '.join(missing)}: {AGAIN}"
    order = list(schema()["properties"])
    error = min(errors, key=lambda e: (order.index(e.path[0]) if e.path and e.path[0] in order else len(order),
                                       len(e.path), [str(p) for p in e.path]))
    return f"has an invalid {_where(list(error.path)[:1])} ({_what(error)}): {AGAIN}"


def _what(error) -> str:
    """The problem at ``error.path``: what is missing there, or the value and what it must be instead."""
    path = list(error.path)
    where = _where(path)
    if error.validator == "required":
        lacking = [key for key in error.validator_value if key not in error.instance]
        return f"{where} lacks {', '.join(map(repr, lacking))}"
    wanted = error.schema.get("description", error.message) if isinstance(error.schema, dict) else error.message
    if len(path) == 1:
        return f"{where} must be {wanted}, not {_shown(error.instance)}"
    return f"{_where(path[1:], quoted=False)} {_shown(error.instance)} is not {wanted}"


def _where(path, quoted: bool = True) -> str:
    """``tolerance``, ``[2].name``: a place in the file."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"'{text}'" if quoted else text


def _shown(value) -> str:
    """A value in a message: containers by their kind, others by their repr (at most 40 characters)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    shown = "null" if value is None else "true" if value is True else "false" if value is False else repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def refuse_foreign(data: dict, path: str | Path, graph: Graph) -> None:
    """The one rule for an override file whose model hash differs from ``graph``'s (``check --overrides``,
    ``compare --overrides`` and ``apply`` all read through here): if it names nodes and none of them is in the
    model, it was made for another model, not another version of this one (retrained: same nodes, new weights),
    and is refused, even with ``--force``. A retrained model's file passes here; each command then says so."""
    names = list(dict.fromkeys(n["name"] for n in data["fp32_nodes"]))
    if not names or data["model"].get("sha256", "") == graph.sha256:
        return  # an empty file fits any model; a same-hash file naming absent nodes is the caller's (damaged) case
    if any(n in graph.by_id for n in names):
        return
    model = graph.path.name if graph.path else "this model"
    raise UsageError(
        f"{str(path)} names {len(names)} node(s), none of which is in {model}: it was made for another model; "
        "pass the override file written for this model (or run 'fp16bisect search' on it)"
    )


def recorded_precision(data: dict) -> str:
    """The precision an override file was searched for: its ``precision`` key, ``fp16`` for files written before
    it existed (and for FP16 files, which do not write it)."""
    return str(data.get("precision", "fp16"))


def file_precision(path: str | Path) -> str:
    """``recorded_precision`` of the file at ``path`` (read before its model is loaded: the model's graph depends
    on it); a file that is no override file says so when it is read."""
    data = _load(Path(path))
    return recorded_precision(data) if isinstance(data, dict) else "fp16"


def refuse_other_precision(data: dict, path: str | Path, precision: str, command: str) -> None:
    """A usage error when the file was searched for another precision than ``command`` runs in."""
    made = recorded_precision(data)
    if made != precision:
        raise UsageError(f"{str(path)!r} was searched for {made.upper()}, but this {command} runs "
                         f"{precision.upper()}: add --precision {made} (or search again with --precision {precision})")


def recorded_tolerance(data: dict, path: str) -> Tolerance:
    """The tolerance an override file was searched with."""
    t = data.get("tolerance")
    try:
        return Tolerance(float(t["atol"]), float(t["rtol"]),
                         None if t.get("min_cosine") is None else float(t["min_cosine"]),
                         float(t.get("max_mismatch", 0.0)))
    except (TypeError, KeyError, ValueError, UsageError):  # UsageError: a value out of range (Tolerance says)
        raise UsageError(f"{path!r} has no valid 'tolerance': pass --atol and --rtol, or rerun 'fp16bisect search'") from None
