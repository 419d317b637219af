"""``fp16bisect.batch(MANIFEST)`` (``fp16bisect batch MANIFEST``): check or search many models in one call, several
at once (a model zoo's CI gate).

The manifest is TOML (``.toml``; read with ``tomllib``, Python 3.11+) or JSON.
An optional ``defaults`` table applies to every entry; each entry
(``[[entry]]`` in TOML, ``"entries": [...]`` in JSON) names:

    model       the ONNX model                                   (required)
    inputs      samples: a path or a list of them, each as --inputs takes it: an .npz, a
                directory, a glob, Polygraphy JSON, a data-loader script FILE.py[:FUNC]  (required)
    references  their references, as --reference takes them     (default: FP32 ONNX Runtime)
    action      "check" or "search"                              (default "check")
    atol, rtol, min_cosine, max_mismatch                         (default: check with overrides: the
                                                                  file's; else fp16bisect's)
    backend     "emulate", "tensorrt" or "auto"                  (default "auto")
    overrides   check: keep this override file's nodes in FP32
    headroom    as --headroom F (search: forced nodes; check: fails a tensor lacking it)
                                                                 (default: check: the override file's; else off)
    precision   "fp16" or "bf16", as --precision                 (default: the override file's, else "fp16")
    accumulate  "fp32" or "fp16", as --accumulate                (default: check: the override file's; else "fp32")
    min_shapes, opt_shapes, max_shapes
                the deployment's input shape profile, as --min-shapes ... take it: trtexec's text
                ("x:1x3x224x224") or a table {input name = "1x3x224x224" or [1, 3, 224, 224]}
    output      search: where to write the override JSON (its journal goes beside it)
                (default: beside the manifest, <name>.overrides.json; <name>-<number>.overrides.json
                when names repeat)
    keep_journal  search: keep the journal once the search has finished, as --keep-journal  (default false)
    minimum     search: then the smallest passing set, as --minimum N (true or "auto": its default budget)
    keep_fp32, keep_fp16
                search: a pattern or a list of patterns, as --keep-fp32/--keep-fp16 PATTERN
    group_by    search: "scope", "scope:DEPTH" or "function", as --group-by
    name        a label for the table                            (default: the model's file name)

Relative paths are relative to the manifest. A manifest that cannot be read
or has a malformed entry is bad input (exit 2, nothing runs); an entry that
fails when it runs (a missing file, a wrong input name, a tolerance FP32
misses) fails alone, with its message, and the others go on. Entries run in
worker processes (``--jobs``) or as Ray tasks (``--ray``); each runs its own
check or search serially through the API's ``run_check`` / ``run_search`` (what the
single commands call), so results are those of the single commands. An entry is
an ``Entry``, built and checked once by ``entry_of``: its values check themselves
(``Tolerance``, the precision, the headroom, the shape profile).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fp16bisect.api.results import _names, _nodes
from fp16bisect.errors import UsageError
from fp16bisect.model.plan_states import Accumulation
from fp16bisect.model.precision import Precision
from fp16bisect.tolerance import GivenTolerance

if TYPE_CHECKING:
    from fp16bisect.strategy.minimum import Setting
    from fp16bisect.strategy.blocks import Grouping
    from fp16bisect.parallel.processes import LocalPool
    from fp16bisect.parallel.ray import RayPool

SCHEMA = "fp16bisect.batch/1"
ACTIONS = ("check", "search")
KEYS = {"model", "inputs", "references", "action", "atol", "rtol", "min_cosine", "max_mismatch", "backend",
        "overrides", "output", "name", "headroom", "min_shapes", "opt_shapes", "max_shapes", "precision",
        "keep_journal", "accumulate", "minimum", "error_stat", "argmax", "topk", "keep_fp32", "keep_fp16", "group_by"}
SHAPE_KEYS = ("min_shapes", "opt_shapes", "max_shapes")
TOLERANCE_KEYS = ("atol", "rtol", "min_cosine", "max_mismatch", "error_stat", "argmax", "topk")  # each per output too


@dataclass(frozen=True)
class Entry:
    """One manifest entry, paths resolved and every value checked (``entry_of``)."""

    number: int
    name: str
    model: str
    inputs: tuple[str, ...]
    action: str = "check"  # "check" or "search"
    references: tuple[str, ...] = ()
    tolerance: GivenTolerance = field(default_factory=GivenTolerance)  # each None: the file's, else the default
    backend: str = "auto"
    overrides: str | None = None  # check: keep this file's nodes in FP32
    output: str | None = None  # search: where the override JSON goes
    headroom: float | None = None
    precision: Precision | None = None  # None: the override file's, else FP16
    profile: dict | None = None  # the deployment's shape profile (model.shapes.profile_of)
    named: bool = False  # the manifest gave ``name`` (else the model's file name)
    keep_journal: bool = False  # search: keep the journal once the search has finished
    accumulate: Accumulation | None = None  # --accumulate; None: check: the override file's; search: fp32
    minimum: Setting = None  # search: --minimum's setting (strategy/minimum.py)
    keep_fp32: tuple[str, ...] = ()  # search: --keep-fp32 patterns (strategy/constraints.py)
    keep_fp16: tuple[str, ...] = ()  # search: --keep-fp16 patterns
    group_by: Grouping | None = None  # search: --group-by (strategy/blocks.py)


@dataclass
class BatchResult:
    """Every entry's result (``BatchRow``, in manifest order) and whether all passed."""

    manifest: str
    entries: list[BatchRow]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.entries)

    def __repr__(self) -> str:
        passed = sum(r.passed for r in self.entries)
        return f"BatchResult({self.manifest!r}: {passed} of {len(self.entries)} entries passed)"

    def to_dict(self) -> dict:
        """The JSON ``fp16bisect batch --json`` writes (schema ``fp16bisect.batch/1``)."""
        return {"schema": SCHEMA, "manifest": str(self.manifest), "passed": self.passed,
                "entries": [r.to_json() for r in self.entries]}

    def write(self, path: str | Path) -> None:
        from fp16bisect.artifacts.files import write_json

        write_json(str(path), self.to_dict())


def read_manifest(path: str) -> list[Entry]:
    """The manifest's entries, paths resolved, defaults applied; a malformed manifest is a UsageError."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"manifest {path!r} not found: pass a .toml or .json file listing the models")
    data = _parse(p, path)
    if not isinstance(data, dict):
        raise UsageError(f"manifest {path!r} must be a table with 'entries' (JSON) or [[entry]] (TOML)")
    entries = data.get("entries", data.get("entry"))
    defaults = data.get("defaults", {})
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"manifest {path!r} lists no entries: add [[entry]] tables (TOML) or an 'entries' list "
                         "(JSON), each with model, inputs and action")
    if not isinstance(defaults, dict):
        raise UsageError(f"manifest {path!r}: 'defaults' must be a table of entry keys")
    read = [entry_of({**defaults, **e} if isinstance(e, dict) else e, i + 1, p.parent, path)
            for i, e in enumerate(entries)]
    return _default_outputs(read, p.parent)


def _parse(p: Path, path: str):
    text = p.read_bytes()
    if p.suffix.lower() == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise UsageError("TOML manifests need Python 3.11 or later (tomllib): write the manifest as JSON") \
                from None
        try:
            return tomllib.loads(text.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"manifest {path!r} is not valid TOML ({exc}): fix it (see README, 'batch')") from None
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"manifest {path!r} is not valid JSON ({exc}): fix it, or name a TOML file *.toml") \
            from None


def _default_outputs(entries: list[Entry], base: Path) -> list[Entry]:
    """A search entry without ``output`` writes its override JSON beside the manifest, named after the entry
    (``<name>.overrides.json``, the model's stem when the entry has no name; ``<name>-<number>...`` when several
    entries would share a file)."""
    def stem(entry: Entry) -> str:
        name = entry.name if entry.named else Path(entry.model).stem
        return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or f"entry-{entry.number}"

    searches = [e for e in entries if e.action == "search" and not e.output]
    counts = Counter(stem(e) for e in searches)
    named = {e.number: stem(e) if counts[stem(e)] == 1 else f"{stem(e)}-{e.number}" for e in searches}
    return [replace(e, output=str(base / f"{named[e.number]}.overrides.json")) if e.number in named else e
            for e in entries]


def entry_of(raw, number: int, base: Path, manifest: str) -> Entry:
    """One manifest entry (its table, ``defaults`` applied) as an ``Entry``; anything wrong is one ``UsageError``
    naming the manifest and the entry."""
    where = f"manifest {manifest!r}, entry {number}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where} is not a table: give model, inputs and action")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KEYS))}")
    if not isinstance(raw.get("model"), str) or not raw["model"]:
        raise UsageError(f"{where} has no 'model': give the path of the ONNX model")
    paths = {key: _paths(raw.get(key, []), key, base, where) for key in ("inputs", "references")}
    if not paths["inputs"]:
        raise UsageError(f"{where} has no 'inputs': give one .npz (or a list) with one array per model input")
    action = raw.get("action", "check")
    if action not in ACTIONS:
        raise UsageError(f"{where}: action {action!r} is neither 'check' nor 'search'")
    if not isinstance(raw.get("keep_journal", False), bool):
        raise UsageError(f"{where}: 'keep_journal' must be true or false, not {raw['keep_journal']!r}")
    for key in ("overrides", "output"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise UsageError(f"{where}: '{key}' must be a path")
    model = str(base / raw["model"])
    overrides, output = (None if raw.get(key) is None else str(base / raw[key]) for key in ("overrides", "output"))
    try:
        return Entry(number=number, name=str(raw.get("name", Path(model).name)), action=action, model=model,
                     overrides=overrides, output=output, inputs=paths["inputs"], references=paths["references"],
                     backend=raw.get("backend", "auto"), named="name" in raw,
                     keep_journal=raw.get("keep_journal", False), **_values(raw))
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _paths(value, key: str, base: Path, where: str) -> tuple[str, ...]:
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: '{key}' must be a path or a list of paths (.npz files, directories, globs)")
    return tuple(str(base / v) for v in value)


def _values(raw: dict) -> dict[str, Any]:
    """The entry's tolerance, precision, headroom, shape profile and backend options, each checked by its own
    value (``Tolerance``, ``model.precision.precision_of``, ``model.headroom.factor``, ``model.shapes.profile_of``,
    ``backends.check_options``): the checks of the command line's flags and the API's arguments."""
    from fp16bisect.backends import Options, check_options
    from fp16bisect.model import headroom, shapes
    from fp16bisect.model.plan_states import accumulation
    from fp16bisect.model.precision import precision_of
    from fp16bisect.strategy import blocks, constraints, minimum

    backend = raw.get("backend", "auto")
    check_options(backend if isinstance(backend, str) else repr(backend), Options())
    return {"tolerance": GivenTolerance(**{k: raw.get(k) for k in TOLERANCE_KEYS}),
            "precision": None if raw.get("precision") is None else precision_of(raw["precision"]),
            "headroom": headroom.factor(raw.get("headroom")), "minimum": minimum.checked(raw.get("minimum")),
            "accumulate": None if raw.get("accumulate") is None else accumulation(raw["accumulate"]),
            "profile": shapes.profile_of(*(raw.get(k) for k in SHAPE_KEYS)),
            "keep_fp32": constraints.patterns(raw.get("keep_fp32"), "keep_fp32"),
            "keep_fp16": constraints.patterns(raw.get("keep_fp16"), "keep_fp16"),
            "group_by": blocks.grouping(raw.get("group_by"))}


def _result(entry: Entry, *, verdict: str, seconds: float | None, error: str) -> dict:
    """An entry's result (the batch JSON's keys, in their order), before it has passed anything."""
    return {"number": entry.number, "name": entry.name, "model": entry.model, "action": entry.action,
            "passed": False, "verdict": verdict, "fp32_nodes": None, "set_size": None, "evaluations": None,
            "seconds": seconds, "error": error, "result": None, "output": entry.output}


@dataclass(frozen=True)
class BatchRow:
    """One entry's result: a row of the batch table and of ``batch --json``'s ``entries`` (its keys in order).

    Attributes:
        number: The entry's number in the manifest (from 1); ``name``, ``model``, ``action`` as the entry says.
        passed: A check passed, or a search found a set that passes and is 1-minimal.
        verdict: ``PASS``, ``FAIL``, ``FOUND``, ``NOT MINIMAL`` or ``ERROR``.
        fp32_nodes: The node ids kept in FP32 (None: the entry did not get that far); ``set_size`` their count.
        evaluations: Plans evaluated; ``seconds`` the entry's wall time (None: the entry was lost).
        error: Why it failed ("" when it passed).
        result: The override JSON a search wrote, or ``check --json``'s content; None on an error.
        output: Where a search wrote its override JSON.
    """

    number: int
    name: str
    model: str
    action: str
    passed: bool
    verdict: str
    fp32_nodes: list[str] | None
    set_size: int | None
    evaluations: int | None
    seconds: float | None
    error: str
    result: dict | None
    output: str | None

    def to_json(self) -> dict:
        return asdict(self)

    def __repr__(self) -> str:
        """One line: ``BatchRow(1 m.onnx: search FOUND; 2 FP32 nodes: a, b; 4 evaluations; 1.1 s)``."""
        nodes = "" if self.fp32_nodes is None else f"; {_nodes(self.fp32_nodes)}"
        evaluations = "" if self.evaluations is None else \
            f"; {self.evaluations} evaluation{'' if self.evaluations == 1 else 's'}"
        seconds = "" if self.seconds is None else f"; {self.seconds:.1f} s"
        first = self.error.splitlines()[0] if self.error else ""
        error = f"; {first[:80]}{'...' if len(first) > 80 else ''}" if first else ""
        return (f"BatchRow({self.number} {_names([self.name])}: {self.action} {self.verdict}{nodes}{evaluations}"
                f"{seconds}{error})")


def run_entry(_state, entry: Entry) -> BatchRow:
    """One entry's check or search (in a worker). Never raises for the entry's own faults: it fails alone."""
    from fp16bisect.errors import ToleranceUnreachable
    from fp16bisect.model import weights

    start = time.perf_counter()
    stores = weights.alive()
    result = _result(entry, verdict="", seconds=0.0, error="")
    try:
        result.update(_check(entry) if entry.action == "check" else _search(entry))
    except (UsageError, ToleranceUnreachable) as exc:
        result.update(verdict="ERROR" if isinstance(exc, UsageError) else "FAIL", error=str(exc))
    except Exception as exc:  # a bug of ours: this entry fails, the others go on
        result.update(verdict="ERROR", error=f"internal error: {type(exc).__name__}: {exc}")
    finally:
        weights.close_since(stores)  # the entry's work directory (a worker process ends without cleaning up)
    result["seconds"] = round(time.perf_counter() - start, 3)
    return BatchRow(**result)


def _check(entry: Entry) -> dict:
    from fp16bisect.api.functions import run_check
    from fp16bisect.run.options import CheckOptions, Judge, Space

    options = CheckOptions(entry.tolerance, Judge(entry.backend, **_shapes(entry.profile)),
                           Space(precision=entry.precision.name if entry.precision else None, accumulate=entry.accumulate,
                                 headroom=entry.headroom))
    checked = run_check(entry.model, list(entry.inputs), options, overrides=entry.overrides,
                        reference=list(entry.references) or None, as_command=True)
    return {"passed": checked.passed, "verdict": "PASS" if checked.passed else "FAIL",
            "error": "" if checked.passed else checked.verdict, "set_size": len(checked.nodes),
            "fp32_nodes": [n.name for n in checked.nodes], "evaluations": 1 + (checked.fp32_passes is not None),
            "result": checked.to_dict()}


def _search(entry: Entry) -> dict:
    from fp16bisect.api.functions import run_search
    from fp16bisect.run.options import Journaling, Judge, SearchOptions, Space, Strategy
    from fp16bisect.tolerance import Tolerance

    options = SearchOptions(entry.tolerance.over(Tolerance()), Judge(entry.backend, **_shapes(entry.profile)),
                            Space(precision=entry.precision.name if entry.precision else None, accumulate=entry.accumulate,
                                  headroom=entry.headroom, keep_fp32=entry.keep_fp32, keep_fp16=entry.keep_fp16,
                                  group_by=str(entry.group_by) if entry.group_by else None),
                            Strategy(minimum=entry.minimum), journal=Journaling(keep_journal=entry.keep_journal),
                            output=entry.output)
    found = run_search(entry.model, list(entry.inputs), options, reference=list(entry.references) or None)
    r = found.outcome.result
    ok = r.passed and r.minimal
    return {"passed": ok, "verdict": "FOUND" if ok else "NOT MINIMAL", "fp32_nodes": list(r.fp32),
            "set_size": len(r.fp32), "evaluations": r.evaluations, "result": found.to_dict(),
            "error": "" if ok else r.minimality}


def _shapes(profile: dict | None) -> dict:
    """An entry's shape profile as the judge's three shape fields (min, opt, max), each trtexec's text."""
    if not profile:
        return {}
    return {key: ",".join(f"{name}:{'x'.join(map(str, dims[k]))}" for name, dims in profile.items())
            for k, key in enumerate(("min_shapes", "opt_shapes", "max_shapes"))}


def run_batch(entries: list[Entry], jobs: int = 2, ray: str | None = None,
              on_result: Callable[[BatchRow], None] | None = None) -> list[BatchRow]:
    """Every entry's result, in manifest order; entries run ``jobs`` at once (worker processes) or on Ray.
    ``on_result``: called with each result as it comes (in completion order)."""
    from fp16bisect.parallel.processes import Died, LocalPool

    pool: RayPool | LocalPool
    if ray is not None:
        from fp16bisect.parallel.ray import RayPool

        pool = RayPool(run_entry, jobs=jobs if jobs > 1 else 0, address=ray or None)
    else:
        pool = LocalPool(run_entry, jobs=max(1, min(jobs, len(entries))))
    results: list = [None] * len(entries)
    try:
        for index, got in pool.run(entries):
            if isinstance(got, Died):
                got = BatchRow(**_result(entries[index], verdict="ERROR", seconds=None,
                                         error=f"the entry was lost: {got.reason}"))
            results[index] = got
            if on_result is not None:
                on_result(got)
    finally:
        pool.close()
    return results


def batch(manifest: str | Path, *, jobs: int = 2, ray: str | None = None,
          progress: Callable[[str], None] | None = None) -> BatchResult:
    """Check or search every model a manifest lists (``fp16bisect batch MANIFEST``), ``jobs`` entries at once.

    Args:
        manifest: A TOML (``.toml``) or JSON file: ``[[entry]]`` tables (``"entries"`` in JSON), each with
            ``model``, ``inputs`` and ``action`` (``"check"`` or ``"search"``), and an optional ``defaults`` table
            (see ``fp16bisect/api/manifest.py`` for every key).
        jobs: Entries run at once, each in a worker process.
        ray: Run the entries as Ray tasks on the cluster at this address (``""``: a local Ray instance).
        progress: A function receiving one line of text per finished entry (e.g. ``print``), or None.

    Returns:
        Every entry's result, in manifest order (``BatchResult``: ``passed``, ``entries``, ``to_dict()``,
        ``write(path)``). An entry that fails (a missing file, a failing check) fails alone, with its message.

    Raises:
        UsageError: A manifest that cannot be read or has a malformed entry (nothing runs).
    """
    from fp16bisect.api import inputs

    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise UsageError(f"jobs={jobs!r}: give the number of entries to run at once, 1 or more")
    entries = read_manifest(str(manifest))
    if ray is not None:
        inputs.parallel(1, None, ray)  # how to install Ray, before any work
    said = None if progress is None else _Said(progress)
    return BatchResult(str(manifest), run_batch(entries, jobs=jobs, ray=ray, on_result=said))


@dataclass(frozen=True)
class _Said:
    """Says each finished entry as one line."""

    write: Callable[[str], None]

    def __call__(self, r: BatchRow) -> None:
        self.write(f"{r.name} (entry {r.number}): {r.verdict} in {r.seconds or 0:.1f} s")
