"""``batch MANIFEST``: check or search many models in one call, several at once (a model zoo's CI gate).

The manifest is TOML (``.toml``; read with ``tomllib``, Python 3.11+) or JSON.
An optional ``defaults`` table applies to every entry; each entry
(``[[entry]]`` in TOML, ``"entries": [...]`` in JSON) names:

    model       the ONNX model                                   (required)
    inputs      samples: a path or a list of them, each as --inputs takes it: an .npz, a
                directory, a glob, Polygraphy JSON, a data-loader script FILE.py[:FUNC]  (required)
    references  their references, as --reference takes them     (default: FP32 ONNX Runtime)
    action      "check" or "search"                              (default "check")
    atol, rtol, min_cosine, max_mismatch                         (default: fp16bisect's)
    backend     "emulate", "tensorrt" or "auto"                  (default "auto")
    overrides   check: keep this override file's nodes in FP32
    headroom    as --headroom F (search: forced nodes; check: fails a tensor lacking it)   (default: off)
    precision   "fp16" or "bf16", as --precision                 (default "fp16")
    min_shapes, opt_shapes, max_shapes
                the deployment's input shape profile, as --min-shapes ... take it: trtexec's text
                ("x:1x3x224x224") or a table {input name = "1x3x224x224" or [1, 3, 224, 224]}
    output      search: where to write the override JSON (its journal goes beside it)
                (default: beside the manifest, <name>.overrides.json; <name>-<number>.overrides.json
                when names repeat)
    keep_journal  search: keep the journal once the search has finished, as --keep-journal  (default false)
    name        a label for the table                            (default: the model's file name)

Relative paths are relative to the manifest. A manifest that cannot be read
or has a malformed entry is bad input (exit 2, nothing runs); an entry that
fails when it runs (a missing file, a wrong input name, a tolerance FP32
misses) fails alone, with its message, and the others go on. Entries run in
worker processes (``--jobs``) or as Ray tasks (``--ray``); each runs its own
check or search serially, so results are those of the single commands.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

from fp16bisect.errors import UsageError

SCHEMA = "fp16bisect.batch/1"
ACTIONS = ("check", "search")
KEYS = {"model", "inputs", "references", "action", "atol", "rtol", "min_cosine", "max_mismatch", "backend",
        "overrides", "output", "name", "headroom", "min_shapes", "opt_shapes", "max_shapes", "precision",
        "keep_journal"}
SHAPE_KEYS = ("min_shapes", "opt_shapes", "max_shapes")
TOLERANCE_KEYS = ("atol", "rtol", "min_cosine", "max_mismatch")


def read_manifest(path: str) -> list[dict]:
    """The manifest's entries, paths resolved, defaults applied; a malformed manifest is a UsageError."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"manifest {path!r} not found: pass a .toml or .json file listing the models")
    text = p.read_bytes()
    if p.suffix.lower() == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise UsageError("TOML manifests need Python 3.11 or later (tomllib): write the manifest as JSON") \
                from None
        try:
            data = tomllib.loads(text.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"manifest {path!r} is not valid TOML ({exc}): fix it (see README, 'batch')") from None
    else:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsageError(f"manifest {path!r} is not valid JSON ({exc}): fix it, or name a TOML file *.toml") \
                from None
    if not isinstance(data, dict):
        raise UsageError(f"manifest {path!r} must be a table with 'entries' (JSON) or [[entry]] (TOML)")
    entries = data.get("entries", data.get("entry"))
    defaults = data.get("defaults", {})
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"manifest {path!r} lists no entries: add [[entry]] tables (TOML) or an 'entries' list "
                         "(JSON), each with model, inputs and action")
    if not isinstance(defaults, dict):
        raise UsageError(f"manifest {path!r}: 'defaults' must be a table of entry keys")
    read = [_entry({**defaults, **e} if isinstance(e, dict) else e, i + 1, p.parent, path)
            for i, e in enumerate(entries)]
    return _default_outputs(read, p.parent)


def _default_outputs(entries: list[dict], base: Path) -> list[dict]:
    """A search entry without ``output`` writes its override JSON beside the manifest, named after the entry
    (``<name>.overrides.json``, the model's stem when the entry has no name; ``<name>-<number>...`` when several
    entries would share a file)."""
    def stem(entry: dict) -> str:
        name = entry["name"] if entry.get("named") else Path(entry["model"]).stem
        return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or f"entry-{entry['number']}"

    searches = [e for e in entries if e["action"] == "search" and not e.get("output")]
    counts = Counter(stem(e) for e in searches)
    for e in searches:
        name = stem(e) if counts[stem(e)] == 1 else f"{stem(e)}-{e['number']}"
        e["output"] = str(base / f"{name}.overrides.json")
    for e in entries:
        e.pop("named", None)
    return entries


def _entry(raw, number: int, base: Path, manifest: str) -> dict:
    where = f"manifest {manifest!r}, entry {number}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where} is not a table: give model, inputs and action")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}")
    if not isinstance(raw.get("model"), str) or not raw["model"]:
        raise UsageError(f"{where} has no 'model': give the path of the ONNX model")
    entry = dict(raw)
    for key in ("inputs", "references"):
        value = entry.get(key, [])
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{where}: '{key}' must be a path or a list of paths (.npz files, directories, globs)")
        entry[key] = [str(base / v) for v in value]
    if not entry["inputs"]:
        raise UsageError(f"{where} has no 'inputs': give one .npz (or a list) with one array per model input")
    entry.setdefault("action", "check")
    if entry["action"] not in ACTIONS:
        raise UsageError(f"{where}: action {entry['action']!r} is neither 'check' nor 'search'")
    for key in TOLERANCE_KEYS:
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value):
            raise UsageError(f"{where}: '{key}' must be a number, not {value!r}")
    if not isinstance(entry.get("keep_journal", False), bool):
        raise UsageError(f"{where}: 'keep_journal' must be true or false, not {entry['keep_journal']!r}")
    _coverage(entry, where)
    for key in ("model", "overrides", "output"):
        if entry.get(key) is not None:
            if not isinstance(entry[key], str):
                raise UsageError(f"{where}: '{key}' must be a path")
            entry[key] = str(base / entry[key])
    entry.setdefault("backend", "auto")
    entry["named"] = "name" in entry
    entry.setdefault("name", Path(entry["model"]).name)
    entry["number"] = number
    return entry


def _coverage(entry: dict, where: str) -> None:
    """``precision``, ``headroom`` and the shape profile, checked as the command line checks its flags (one check
    each: ``model.precision.precision_of``, ``model.headroom.factor``, ``model.shapes.profile_of``); the profile
    kept as ``profile``."""
    from fp16bisect.model import headroom, shapes
    from fp16bisect.model.precision import precision_of

    try:
        entry["precision"] = precision_of(entry.get("precision"))
        entry["headroom"] = headroom.factor(entry.get("headroom"))
        entry["profile"] = shapes.profile_of(*(entry.pop(k, None) for k in SHAPE_KEYS))
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _options(entry: dict, tolerance, **more):
    """The entry's ``SearchOptions``: its tolerance, backend, precision, headroom and shape profile."""
    from fp16bisect.backends.base import Options
    from fp16bisect.run.options import SearchOptions

    return SearchOptions(tolerance, entry["backend"], Options.of(input_shapes=entry.get("profile")),
                         headroom=entry.get("headroom"), precision=entry["precision"], **more)


def _result(entry: dict, *, verdict: str, seconds: float | None, error: str) -> dict:
    """An entry's result (the batch JSON's keys, in their order), before it has passed anything."""
    return {"number": entry["number"], "name": entry["name"], "model": entry["model"], "action": entry["action"],
            "passed": False, "verdict": verdict, "fp32_nodes": None, "set_size": None, "evaluations": None,
            "seconds": seconds, "error": error, "result": None, "output": entry.get("output")}


def run_entry(_state, entry: dict) -> dict:
    """One entry's check or search (in a worker). Never raises for the entry's own faults: it fails alone."""
    from fp16bisect.errors import ToleranceUnreachable
    from fp16bisect.tolerance import Tolerance

    from fp16bisect.model import weights

    start = time.perf_counter()
    stores = weights.alive()
    result = _result(entry, verdict="", seconds=0.0, error="")
    try:
        defaults = Tolerance()
        tolerance = Tolerance(**{k: entry[k] if entry.get(k) is not None else getattr(defaults, k)
                                 for k in TOLERANCE_KEYS})
        if entry["action"] == "check":
            _check(entry, tolerance, result)
        else:
            _search(entry, tolerance, result)
    except (UsageError, ToleranceUnreachable) as exc:
        result.update(verdict="ERROR" if isinstance(exc, UsageError) else "FAIL", error=str(exc))
    except Exception as exc:  # a bug of ours: this entry fails, the others go on
        result.update(verdict="ERROR", error=f"internal error: {type(exc).__name__}: {exc}")
    finally:
        weights.close_since(stores)  # the entry's work directory (a worker process ends without cleaning up)
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def _check(entry: dict, tolerance, result: dict) -> None:
    from fp16bisect.diagnose.preflight import check_model, verdict

    options = _options(entry, tolerance)
    outcome = check_model(entry["model"], entry["inputs"], entry["references"] or None, entry.get("overrides"),
                          options)
    line = verdict(outcome, f"fp16bisect search {entry['model']}")
    result.update(passed=outcome.passed, verdict="PASS" if outcome.passed else "FAIL", error="" if outcome.passed
                  else line, set_size=len(outcome.overrides.nodes) if outcome.overrides else 0,
                  fp32_nodes=list(outcome.overrides.nodes) if outcome.overrides else [],
                  evaluations=outcome_evaluations(outcome), result={**outcome.data(), "verdict": line})


def outcome_evaluations(outcome) -> int:
    return 1 + (outcome.fp32 is not None)


def _search(entry: dict, tolerance, result: dict) -> None:
    from fp16bisect.artifacts.files import check_writable, write_json
    from fp16bisect.run.paths import remove_journals
    from fp16bisect.run.pipeline import search_model

    output = entry.get("output")
    if output:
        check_writable(output)
    options = _options(entry, tolerance, output=output, keep_journal=entry.get("keep_journal", False))
    outcome = search_model(entry["model"], entry["inputs"], entry["references"] or None, options)
    r = outcome.result
    ok = r.passed and r.minimal
    data = outcome.overrides.to_json()
    if output:
        write_json(output, data)
        remove_journals(outcome)
    result.update(passed=ok, verdict="FOUND" if ok else "NOT MINIMAL", fp32_nodes=list(r.fp32),
                  set_size=len(r.fp32), evaluations=r.evaluations, result=data,
                  error="" if ok else r.minimality)


def run_batch(entries: list[dict], jobs: int = 2, ray: str | None = None, on_result=None) -> list[dict]:
    """Every entry's result, in manifest order; entries run ``jobs`` at once (worker processes) or on Ray.
    ``on_result``: called with each result as it comes (in completion order)."""
    from fp16bisect.parallel.processes import Died, LocalPool

    if ray is not None:
        from fp16bisect.parallel.ray import RayPool

        pool = RayPool(run_entry, jobs=jobs if jobs > 1 else 0, address=ray or None)
    else:
        pool = LocalPool(run_entry, jobs=max(1, min(jobs, len(entries))))
    results: list = [None] * len(entries)
    try:
        for index, got in pool.run(entries):
            if isinstance(got, Died):
                got = _result(entries[index], verdict="ERROR", seconds=None, error=f"the entry was lost: {got.reason}")
            results[index] = got
            if on_result is not None:
                on_result(got)
    finally:
        pool.close()
    return results


def write_results(path: str, manifest: str, results: list[dict]) -> None:
    from fp16bisect.artifacts.files import write_json

    write_json(path, {"schema": SCHEMA, "manifest": str(manifest), "passed": all(r["passed"] for r in results),
                      "entries": results})
