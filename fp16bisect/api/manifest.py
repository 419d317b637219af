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
    overrides   check: keep this override file's nodes in FP32
    output      search: where to write the override JSON (its journal goes beside it)
                (default: beside the manifest, <name>.overrides.json; <name>-<number>.overrides.json
                when names repeat)
    name        a label for the table                            (default: the model's file name)

and any option of its action, by the name of its field in the option records (``option_keys``): the tolerance's
values (``atol``, ``rtol``, ``min_cosine``, ``max_mismatch``, ``error_stat``, ``argmax``, ``topk``), the judge's
(``backend``, ``check``, ``typing``, ``opt_level``, ``repeats``, the shapes, ...), the plan space's
(``precision``, ``accumulate``, ``headroom``, ``keep_fp32``, ...), the strategy's (``prior``, ``minimum``,
``objective``) and the journal's (``keep_journal``, ...): each flag of ``fp16bisect search`` or ``check`` with
underscores for dashes, with the flag's default and the same check (``fp16bisect.run.options``). Parallel
evaluation's (``jobs``, ``devices``, ``ray``) are the batch's own: entries run serially, ``jobs`` at once.

Relative paths are relative to the manifest. A manifest that cannot be read
or has a malformed entry is bad input (exit 2, nothing runs); a ``defaults`` key
an entry's action does not take is left out of that entry (a search's ``minimum``
for a check entry), an entry's own is bad input. An entry that
fails when it runs (a missing file, a wrong input name, a tolerance FP32
misses) fails alone, with its message, and the others go on. Entries run in
worker processes (``--jobs``) or as Ray tasks (``--ray``); each runs its own
check or search serially through the API's ``run_check`` / ``run_search`` (what the
single commands call), so results are those of the single commands. An entry is
an ``Entry``, built and checked once by ``entry_of``: its options are a ``SearchOptions``
or ``CheckOptions`` made from its keys (``of``), whose records check themselves.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

from fp16bisect import records
from fp16bisect.api.results import _names, _nodes
from fp16bisect.errors import UsageError
from fp16bisect.run.options import CheckOptions, SearchOptions

if TYPE_CHECKING:
    from fp16bisect.parallel.processes import LocalPool
    from fp16bisect.parallel.ray import RayPool

SCHEMA = "fp16bisect.batch/1"
ACTIONS = ("check", "search")
OPTIONS: dict[str, Union[type[SearchOptions], type[CheckOptions]]] = {"search": SearchOptions, "check": CheckOptions}
ENTRY_KEYS = ("model", "inputs", "references", "action", "overrides", "output", "name")
BATCH_OWN = ("jobs", "devices", "ray")  # parallel evaluation: the batch's --jobs and --ray, not an entry's


def option_keys(action: str) -> list[str]:
    """The option keys an entry of ``action`` takes: its options' flat keys (``SearchOptions.keys``), but
    ``accept`` (a Python function) and parallel evaluation's."""
    return [k for k in OPTIONS[action].keys(action) if k != "accept" and k not in BATCH_OWN]


def keys() -> set[str]:
    """Every key an entry may have: its own (``ENTRY_KEYS``) and the options of a search or a check."""
    return {*ENTRY_KEYS, *option_keys("search"), *option_keys("check")}


def path_keys() -> set[str]:
    """The options that name a file (``Flag.path``): a manifest's is relative to the manifest."""
    return {f.name for options in OPTIONS.values() for record in options.RECORDS.values() for f in fields(record)
            if (records.flag_of(f) or records.Flag("")).path}


@dataclass(frozen=True)
class Entry:
    """One manifest entry, paths resolved and every value checked (``entry_of``): its options are a search's or a
    check's records (``SearchOptions``, whose ``output`` is where the override JSON goes; ``CheckOptions``)."""

    number: int
    name: str
    model: str
    inputs: tuple[str, ...]
    options: Union[SearchOptions, CheckOptions]
    action: str = "check"  # "check" or "search"
    references: tuple[str, ...] = ()
    overrides: str | None = None  # check: keep this file's nodes in FP32
    named: bool = False  # the manifest gave ``name`` (else the model's file name)

    @property
    def output(self) -> str | None:
        """A search's override JSON."""
        return self.options.output if isinstance(self.options, SearchOptions) else None


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
    unknown = sorted(records.shown(k) for k in defaults if k not in keys())
    if unknown:
        raise UsageError(f"manifest {path!r}, defaults: unknown key(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(keys()))}")
    read = [entry_of(e, i + 1, p.parent, path, defaults) for i, e in enumerate(entries)]
    return _default_outputs(read, p.parent)


def _parse(p: Path, path: str) -> Any:  # a TOML or JSON document, checked by the caller
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
    return [replace(e, options=_written_to(e.options, str(base / f"{named[e.number]}.overrides.json")))
            if e.number in named else e for e in entries]


def _written_to(options: SearchOptions | CheckOptions, output: str) -> SearchOptions:
    assert isinstance(options, SearchOptions)  # a search entry's
    return replace(options, output=output)


def entry_of(raw: object, number: int, base: Path, manifest: str, defaults: dict | None = None) -> Entry:
    """One manifest entry (its table; ``defaults``: the manifest's, those its action takes) as an ``Entry``;
    anything wrong is one ``UsageError`` naming the manifest and the entry."""
    where = f"manifest {manifest!r}, entry {number}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where} is not a table: give model, inputs and action")
    defaults = defaults or {}
    unknown = sorted(records.shown(k) for k in raw if k not in keys())
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(keys()))}")
    action = raw.get("action", defaults.get("action", "check"))
    if action not in ACTIONS:
        raise UsageError(f"{where}: action {action!r} is neither 'check' nor 'search'")
    raw = {**{k: v for k, v in defaults.items() if k in ENTRY_KEYS or k in option_keys(action)}, **raw}
    if not isinstance(raw.get("model"), str) or not raw["model"]:
        raise UsageError(f"{where} has no 'model': give the path of the ONNX model")
    paths = {key: _paths(raw.get(key, []), key, base, where) for key in ("inputs", "references")}
    if not paths["inputs"]:
        raise UsageError(f"{where} has no 'inputs': give one .npz (or a list) with one array per model input")
    for key in ("overrides", "output", *path_keys()):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise UsageError(f"{where}: '{key}' must be a path")
    model = str(base / raw["model"])
    located = {k: str(base / raw[k]) for k in ("overrides", "output", *path_keys()) if raw.get(k) is not None}
    try:
        options = _options(action, {**raw, **located}, base, number)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    return Entry(number=number, name=str(raw.get("name", Path(model).name)), action=action, model=model,
                 inputs=paths["inputs"], options=options, references=paths["references"],
                 overrides=located.get("overrides"), named="name" in raw)


def _options(action: str, raw: dict, base: Path, number: int) -> SearchOptions | CheckOptions:
    """The entry's option keys as its action's options (``SearchOptions.of``, ``CheckOptions.of``: each record
    checks its fields); a check's plan files (``backend = "command"``) go beside the manifest, one folder an
    entry."""
    given = {k: v for k, v in raw.items() if k not in ENTRY_KEYS}
    batch = sorted(k for k in given if k in BATCH_OWN)
    if batch:
        raise UsageError(f"{', '.join(batch)}: the batch's own (fp16bisect batch --jobs N, --ray; an entry runs "
                         "serially): drop it")
    other = sorted(set(given) - set(option_keys(action)))
    if other:
        them = "search" if action == "check" else "check"
        raise UsageError(f"{', '.join(other)}: a {them}'s option, not a {action}'s: drop it, or make the entry a "
                         f"{them} (action = \"{them}\")")
    if action == "search":
        return SearchOptions.of(**given, output=raw.get("output"))
    return CheckOptions.of(**given, plans=str(base / f"entry-{number}.plans"))


def _paths(value: object, key: str, base: Path, where: str) -> tuple[str, ...]:
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: '{key}' must be a path or a list of paths (.npz files, directories, globs)")
    return tuple(str(base / v) for v in value)


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


def run_entry(_state: None, entry: Entry) -> BatchRow:
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

    assert isinstance(entry.options, CheckOptions)
    checked = run_check(entry.model, list(entry.inputs), entry.options, overrides=entry.overrides,
                        reference=list(entry.references) or None, as_command=True)
    return {"passed": checked.passed, "verdict": "PASS" if checked.passed else "FAIL",
            "error": "" if checked.passed else checked.verdict, "set_size": len(checked.nodes),
            "fp32_nodes": [n.name for n in checked.nodes], "evaluations": 1 + (checked.fp32_passes is not None),
            "result": checked.to_dict()}


def _search(entry: Entry) -> dict:
    from fp16bisect.api.functions import run_search

    assert isinstance(entry.options, SearchOptions)
    found = run_search(entry.model, list(entry.inputs), entry.options, reference=list(entry.references) or None)
    r = found.outcome.result
    ok = r.passed and r.minimal
    return {"passed": ok, "verdict": "FOUND" if ok else "NOT MINIMAL", "fp32_nodes": list(r.fp32),
            "set_size": len(r.fp32), "evaluations": r.evaluations, "result": found.to_dict(),
            "error": "" if ok else r.minimality}


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
    from fp16bisect.parallel import Parallel

    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise UsageError(f"jobs={jobs!r}: give the number of entries to run at once, 1 or more")
    if not isinstance(manifest, (str, Path)):
        raise UsageError(f"manifest is a {type(manifest).__name__}: pass the path of a .toml or .json manifest")
    if progress is not None and not callable(progress):
        raise UsageError(f"progress is a {type(progress).__name__}: pass a function taking one line of text, or None")
    Parallel(ray=ray)  # the address checked, and how to install Ray said, before any work
    entries = read_manifest(str(manifest))
    said = None if progress is None else _Said(progress)
    return BatchResult(str(manifest), run_batch(entries, jobs=jobs, ray=ray, on_result=said))


@dataclass(frozen=True)
class _Said:
    """Says each finished entry as one line."""

    write: Callable[[str], None]

    def __call__(self, r: BatchRow) -> None:
        self.write(f"{r.name} (entry {r.number}): {r.verdict} in {r.seconds or 0:.1f} s")
