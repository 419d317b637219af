"""The override file (schema ``fp16bisect.overrides/1``) as one type, ``Overrides``: read, validated, written.

The file is a public interface that build pipelines read; ``overrides.schema.json`` beside this module
declares it (keys, types, ranges), ``artifacts/override_json.py`` builds it (an ``Overrides``), ``read`` reads
it (an ``Overrides``), and ``Overrides.to_json`` is what every writer writes. A file that does not match the
schema is refused with one line naming the key and what is wrong (``jsonschema``, draft 2020-12). ``Node`` is the
node record the file, the API's results and the console share. Sections:

    schema      "fp16bisect.overrides/1"
    model       {path, sha256}
    backend     {name, versions, ...what the backend says of itself}
    precision   "fp16" or "bf16";  accumulate  "fp32" or "fp16" (what the judge assumed FP16 nodes add in)
    tolerance   {atol, rtol, min_cosine, max_mismatch}
    fp32_nodes  [{name, op_type, outputs, fp32_profile}]   name = fp16bisect node id
    fp32_accumulate_nodes  the same records: nodes stored in FP16 that add in FP32 (absent in older files: none)
    search      {status, candidates, evaluations, minimal, minimality, verified, contradictions, seconds,
                 trace, build_failures: [{fp32: [node ids], error: the backend's message}], journal, ...}
    prior       the emulator's search the search started from (a search's result only), or null
    metrics     {fp32, fp16, fp16_backend, with_overrides}: output -> worst metrics over samples
    skipped_nodes, notes, conversions   what the search did not cover, and constants FP16 cannot hold
    exports     {strongly_typed: {tensorrt, command, trtexec}, trtexec: {...}, modelopt_autocast: {...}}
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from fp16bisect.errors import UsageError, shown
from fp16bisect.model.plan_states import Accumulation, accumulation, plan_of
from fp16bisect.tolerance import Tolerance

if TYPE_CHECKING:  # the record reads and writes JSON without loading ONNX
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.precision import Precision

SCHEMA = "fp16bisect.overrides/1"
AGAIN = "run 'fp16bisect search' again to write a new one"
# Every top-level key, in the file's order (overrides.schema.json's "properties"). A plan's file (command backend)
# has the required ones only; a search's result adds where it was verified (environment), the precision, the prior
# and what the graph holds beyond the search.
SECTIONS = ("schema", "model", "backend", "environment", "precision", "accumulate", "tolerance", "fp32_nodes",
            "fp32_accumulate_nodes", "search", "prior", "diagnosis", "metrics", "shapes", "samples", "headroom",
            "accumulators", "constraints", "blocks", "skipped_nodes", "notes", "conversions", "exports")


@dataclass(frozen=True)
class Recorded:
    """What an override file says a check judges with: its tolerance, precision and headroom (``--headroom F``
    the search was given; None: none)."""

    path: str
    tolerance: Tolerance
    precision: Precision
    headroom: float | None
    accumulate: str = "fp32"


@dataclass(frozen=True)
class Node:
    """One ONNX node kept in FP32: the one node record of the file, the API's results and the console.

    Attributes:
        name: fp16bisect's node id: the ONNX node name when it is non-empty and unique, else its first output
            tensor's name.
        op_type: The ONNX operator, e.g. ``"Mul"`` (``""`` when a hand-written file leaves it out).
        outputs: The node's output tensor names, to find it in the original model.
    """

    name: str
    op_type: str
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, node) -> Node:
        """The record of a graph's node (``model.graph.Node``: its id, op type and outputs)."""
        return cls(node.id, node.op_type, tuple(node.outputs))


@dataclass(frozen=True)
class Pinned:
    """An entry of the file's ``fp32_nodes``: the node, what the FP32 run saw there (why it was suspected, not
    proof it is needed; ``''`` for nothing), and whether ``--headroom`` kept it (not the search)."""

    node: Node
    fp32_profile: str = ""
    forced: bool = False


@dataclass(frozen=True)
class Overrides:
    """An override file (schema ``fp16bisect.overrides/1``): the one way it is read (``read``, ``from_json``) and
    written (``to_json``). Made only from JSON that validates against the declared schema, so every field below
    is typed and present; the JSON itself is kept whole (a copy), so keys this type does not model (and a
    hand-written file's spellings) pass through unchanged: ``from_json(d).to_json() == d``.

    Attributes:
        model_path: The model's path as the search was given it.
        model_sha256: The model file's SHA-256 (``''`` when the file gives none).
        precision: The low precision searched for, ``"fp16"`` or ``"bf16"`` (``"fp16"`` when the file does not
            say: files written before the key existed).
        tolerance: The tolerance searched with; None when the file's is incomplete (``recorded_tolerance``).
        pinned: The ``fp32_nodes`` entries, in the file's order.
        accumulating: The ``fp32_accumulate_nodes`` entries (stored in FP16, adding in FP32), in the file's order
            (empty for files written before the key existed).
        accumulate: What the judge assumed FP16 nodes add in, ``"fp32"`` or ``"fp16"`` (``"fp32"`` when the file
            does not say).
        backend, search, metrics, exports: Those sections (the record's own: read them, do not change them).
        environment: Where the answer was verified (``None`` when the file records none).
        headroom: The answer's headroom section (``None`` when the file has none).
    """

    data: Mapping[str, Any] = field(repr=False)
    model_path: str = field(init=False)
    model_sha256: str = field(init=False)
    precision: str = field(init=False)
    tolerance: Tolerance | None = field(init=False)
    pinned: tuple[Pinned, ...] = field(init=False)
    accumulating: tuple[Pinned, ...] = field(init=False)
    accumulate: Accumulation = field(init=False)
    backend: dict[str, Any] = field(init=False, repr=False)
    search: dict[str, Any] = field(init=False, repr=False)
    metrics: dict[str, Any] = field(init=False, repr=False)
    exports: dict[str, Any] = field(init=False, repr=False)
    environment: dict[str, Any] | None = field(init=False, repr=False)
    headroom: dict[str, Any] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        data = copy.deepcopy(dict(self.data))
        typed = {
            "data": data, "model_path": str(data["model"].get("path", "")),
            "model_sha256": str(data["model"].get("sha256", "")), "precision": str(data.get("precision", "fp16")),
            "tolerance": _tolerance(data["tolerance"]),
            "pinned": _entries(data["fp32_nodes"]), "accumulating": _entries(data.get("fp32_accumulate_nodes", ())),
            "accumulate": accumulation(data.get("accumulate", "fp32")),
            "backend": data["backend"], "search": data["search"], "metrics": data["metrics"],
            "exports": data["exports"], "environment": data.get("environment"), "headroom": data.get("headroom")}
        for name, value in typed.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_json(cls, data, where: str = "the override data") -> Overrides:
        """The record of ``data`` (the parsed file); a ``UsageError`` (one line: ``where``, the key, what is wrong
        and the fix) when it does not validate against the schema."""
        problem = problems(data)
        if problem:
            raise UsageError(f"{where} {problem}")
        return cls(data)

    def to_json(self) -> dict:
        """The file's JSON, exactly as it was built (sections in the schema's order) or read (a new dict, safe to
        change): what every writer of the file writes."""
        return copy.deepcopy(dict(self.data))

    def replaced(self, **sections) -> Overrides:
        """A copy with these top-level sections replaced (e.g. ``environment=``, ``exports=``, ``model=``), each
        in its place in the file's order."""
        data = {**self.data, **sections}
        return Overrides.from_json({k: data[k] for k in sorted(data, key=_order)}, "the changed override data")

    def __repr__(self) -> str:
        """One line: ``Overrides(m.onnx: 2 FP32 nodes: a, b; fp16; atol 0.01, rtol 0.01)``."""
        names = self.names
        shown = ", ".join(names[:3]) + (f", ... ({len(names) - 3} more)" if len(names) > 3 else "")
        return (f"Overrides({Path(self.model_path).name}: {len(names)} FP32 node{'' if len(names) == 1 else 's'}"
                f"{': ' + shown if names else ''}{self._accumulating_shown()}; {self.precision}; "
                f"{self.tolerance or 'no valid tolerance'})")

    def _accumulating_shown(self) -> str:
        count = len(self.accumulating)
        return f"; {count} FP32-accumulation node{'' if count == 1 else 's'}" if count else ""

    @property
    def fp32_nodes(self) -> tuple[Node, ...]:
        """The nodes kept in FP32, in the file's order."""
        return tuple(p.node for p in self.pinned)

    @property
    def fp32_accumulate_nodes(self) -> tuple[Node, ...]:
        """The nodes stored in FP16 that add in FP32 (the third state), in the file's order."""
        return tuple(p.node for p in self.accumulating)

    @property
    def plan(self) -> frozenset[str]:
        """The plan the file means (``model/plan_states.py``): its FP32 ids and its FP32-accumulation marks."""
        return plan_of(self.names, (p.node.name for p in self.accumulating))

    @property
    def names(self) -> list[str]:
        """The node ids kept in FP32, in the file's order, each once."""
        return list(dict.fromkeys(p.node.name for p in self.pinned))

    def section(self, key: str, default: Any = None) -> Any:
        """A section this type does not model (``prior``, ``shapes``, ``samples``, ``notes``, ``conversions``,
        ``skipped_nodes``): a copy, or ``default`` when the file has none."""
        return copy.deepcopy(self.data.get(key, default))

    @property
    def notes(self) -> list[str]:
        """Notes on the model (a search's result), else empty."""
        return list(self.data.get("notes") or [])


def _entries(nodes) -> tuple[Pinned, ...]:
    return tuple(Pinned(Node(n["name"], n.get("op_type", ""), tuple(n.get("outputs", ()))), n.get("fp32_profile", ""),
                        bool(n.get("forced", False))) for n in nodes)


def _order(key: str) -> int:
    return SECTIONS.index(key) if key in SECTIONS else len(SECTIONS)


def _tolerance(t) -> Tolerance | None:
    """The file's tolerance, or None when it lacks atol or rtol (the schema allows null)."""
    try:
        return Tolerance.from_json(t)
    except (TypeError, KeyError, ValueError, AttributeError, UsageError):
        return None


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
         graph: Graph | None = None) -> Overrides:
    """Read and validate an override file; refuse one made for another model unless ``force``.

    With ``graph``, also refuse (whatever ``force``) a file none of whose nodes is in that model: see
    ``refuse_foreign``."""
    path = Path(path)
    overrides = Overrides.from_json(_load(path), repr(str(path)))
    if graph is not None:
        refuse_foreign(overrides, path, graph)
    if model_path is not None and not force:
        digest = graph.sha256 if graph is not None and graph.sha256 else \
            hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
        if digest != overrides.data["model"].get("sha256"):
            raise UsageError(
                f"{str(path)!r} was made for another model (sha256 {str(overrides.data['model'].get('sha256'))[:12]}"
                f"..., this one is {digest[:12]}...): rerun 'fp16bisect search' on this model, or pass --force"
            )
    return overrides


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


def refuse_foreign(overrides: Overrides, path: str | Path, graph: Graph) -> None:
    """The one rule for an override file whose model hash differs from ``graph``'s (``check --overrides``,
    ``compare --overrides`` and ``apply`` all read through here): if it names nodes and none of them is in the
    model, it was made for another model, not another version of this one (retrained: same nodes, new weights),
    and is refused, even with ``--force``. A retrained model's file passes here; each command then says so."""
    names = overrides.names + [n.name for n in overrides.fp32_accumulate_nodes]
    if not names or overrides.model_sha256 == graph.sha256:
        return  # an empty file fits any model; a same-hash file naming absent nodes is the caller's (damaged) case
    if any(n in graph.by_id for n in names):
        return
    model = graph.path.name if graph.path else "this model"
    raise UsageError(
        f"{str(path)} names {len(names)} node(s), none of which is in {model}: it was made for another model; "
        "pass the override file written for this model (or run 'fp16bisect search' on it)"
    )


def followed(graph: Graph, names: list[str], path: str | Path) -> tuple[list[str], str]:
    """The FP32 node ids ``names`` (an override file's, which a hand-written or AutoCast-derived list may fill with
    any node) as a plan on ``graph`` holds them, and one line saying what was changed ('' when nothing): a candidate,
    or an id the model lacks (each caller's case), stays; a transparent node (it moves data and takes its
    producers' precision) is replaced by its producers (``Graph.producers``). A node with nothing behind it to keep
    in FP32 (no float output, a custom domain's, a transparent node of graph inputs and constants) is refused."""
    ids: list[str] = []
    moved: list[str] = []
    candidates = {n.id for n in graph.candidates}
    for name in names:
        node = graph.by_id.get(name)
        if node is None or name in candidates:
            ids.append(name)
            continue
        producers = graph.producers(node)
        if not producers:
            raise UsageError(f"{str(path)!r}: node {shown(name)} ({node.op_type}) {_nothing_behind(graph, node)}, so "
                             "there is nothing to keep in FP32: remove it from the file's fp32_nodes")
        ids += producers
        moved.append(f"{shown(name)} -> {', '.join(shown(p) for p in producers)}")
    if not moved:
        return list(dict.fromkeys(ids)), ""
    listed = "; ".join(moved[:3]) + (f"; and {len(moved) - 3} more" if len(moved) > 3 else "")
    return list(dict.fromkeys(ids)), (
        f"{str(path)!r} keeps {len(moved)} node(s) in FP32 that move data (no candidates: each takes its "
        f"producers' precision), so their producers are kept in FP32 instead: {listed}")


def _nothing_behind(graph: Graph, node) -> str:
    """Why no plan can keep ``node`` (not a candidate) in FP32, for ``followed``'s refusal."""
    if not graph.float_outputs(node):
        return "has no float output"
    if node.id in graph.skipped:
        return f"is no candidate ({graph.skipped[node.id]}: it runs as in the model in every plan)"
    return "moves only graph inputs and constants (no candidate computes what it passes on)"


def file_precision(path: str | Path) -> str:
    """The precision the file at ``path`` was searched for (read before its model is loaded: the model's graph
    depends on it): its ``precision`` key, ``fp16`` for files without one; a file that is no override file says
    so when it is read."""
    data = _load(Path(path))
    return str(data.get("precision", "fp16")) if isinstance(data, dict) else "fp16"


def refuse_other_precision(overrides: Overrides, path: str | Path, precision: str, command: str) -> None:
    """A usage error when the file was searched for another precision than ``command`` runs in."""
    made = overrides.precision
    if made != precision:
        raise UsageError(f"{str(path)!r} was searched for {made.upper()}, but this {command} runs "
                         f"{precision.upper()}: add --precision {made} (or search again with --precision {precision})")


def recorded_tolerance(overrides: Overrides, path: str) -> Tolerance:
    """The tolerance an override file was searched with; a usage error when it records none."""
    if overrides.tolerance is None:
        raise UsageError(f"{path!r} has no valid 'tolerance': pass --atol and --rtol, or rerun 'fp16bisect search'")
    return overrides.tolerance
