"""Reads the precision-override JSON that build pipelines read (validated here), and its recorded tolerance.

Schema ``fp16bisect.overrides/1`` (a public interface; change deliberately):

    schema      "fp16bisect.overrides/1"
    model       {path, sha256}
    backend     {name, versions}
    tolerance   {atol, rtol, min_cosine, max_mismatch}
    fp32_nodes  [{name, op_type, outputs, fp32_profile}]   name = fp16bisect node id
    search      {status, candidates, evaluations, minimal, minimality, verified, contradictions, seconds,
                 trace, build_failures: [{fp32: [node ids], error: the backend's message}]}
    metrics     {fp32, fp16, with_overrides}: output -> worst metrics over samples
    exports     {strongly_typed: {tensorrt, command, trtexec}, trtexec: {...}, modelopt_autocast: {...}}
                (the strongly typed route first: TensorRT must honour the types of a mixed-precision model,
                while 10.x weak-typing pins can be ignored where layers are fused, NVIDIA/TensorRT#3889)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.tolerance import Tolerance

SCHEMA = "fp16bisect.overrides/1"
REQUIRED = ("schema", "model", "backend", "tolerance", "fp32_nodes", "search", "metrics", "exports")


def read(path: str | Path, model_path: str | Path | None = None, force: bool = False,
         graph: Graph | None = None) -> dict:
    """Read and validate an override file; refuse one made for another model unless ``force``.

    With ``graph``, also refuse (whatever ``force``) a file none of whose nodes is in that model: see
    ``refuse_foreign``."""
    path = Path(path)
    again = "run 'fp16bisect search' again to write a new one"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"override file {str(path)!r} not found: run 'fp16bisect search' to make one") from None
    except IsADirectoryError:
        raise UsageError(f"override file {str(path)!r} is a directory: pass the JSON 'fp16bisect search' wrote") \
            from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{str(path)!r} is not an override file (not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at "
            f"position {exc.start}): {again}"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{str(path)!r} is not an override file ({exc}): {again}") from None
    except RecursionError:
        raise UsageError(f"{str(path)!r} is not an override file (JSON nested too deeply): {again}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{str(path)!r} is not an fp16bisect override file (schema {SCHEMA!r} expected)")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise UsageError(f"{str(path)!r} lacks key(s) {', '.join(missing)}: {again}")
    nodes = data["fp32_nodes"]
    if not isinstance(nodes, list) or not all(isinstance(n, dict) and isinstance(n.get("name"), str) for n in nodes):
        raise UsageError(f"{str(path)!r}: fp32_nodes must be a list of objects with a 'name'; {again}")
    if not isinstance(data["model"], dict) or not isinstance(data["model"].get("sha256", ""), str):
        raise UsageError(f"{str(path)!r}: 'model' must be an object with the model's 'sha256'; {again}")
    not_objects = [k for k in ("backend", "search", "metrics", "exports") if not isinstance(data[k], dict)]
    if not_objects:
        raise UsageError(f"{str(path)!r}: {', '.join(map(repr, not_objects))} must be JSON object(s); {again}")
    problem = _tolerance_problem(data["tolerance"])
    if problem:
        raise UsageError(f"{str(path)!r} has an invalid 'tolerance' ({problem}): {again}")
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


def _tolerance_problem(t) -> str:
    """What is wrong with a recorded tolerance, or ''. Keys may be missing (then ``apply --verify`` asks for
    --atol and --rtol); a value present must be one 'fp16bisect search' could have written."""
    if not isinstance(t, dict):
        return "not an object"

    def number(key, low, high) -> str:
        value = t.get(key)
        if value is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            return f"{key} {value!r} is not a number from {low:g} to {high:g}"
        return ""

    return (number("atol", 0, 1e300) or number("rtol", 0, 1e300) or number("min_cosine", -1, 1)
            or number("max_mismatch", 0, 1))



def recorded_tolerance(data: dict, path: str) -> Tolerance:
    """The tolerance an override file was searched with."""
    t = data.get("tolerance")
    try:
        return Tolerance(float(t["atol"]), float(t["rtol"]),
                         None if t.get("min_cosine") is None else float(t["min_cosine"]),
                         float(t.get("max_mismatch", 0.0)))
    except (TypeError, KeyError, ValueError):
        raise UsageError(f"{path!r} has no valid 'tolerance': pass --atol and --rtol, or rerun 'fp16bisect search'") from None
