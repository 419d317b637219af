"""What the Python API returns: typed results of ``search``, ``check``, ``scan`` and ``apply``.

Each result holds typed values (``Node`` records, metrics, verdicts) to read and assert on, ``to_dict()``: the JSON
the command line writes for the same run, and a short ``repr`` (one line). ``outcome`` is the pipeline's typed
record of the run (``fp16bisect.run.outcome.Outcome`` for a search, ``diagnose.preflight.CheckOutcome`` for a
check, both documented in the API reference): what the console and the HTML report print from, so a script reads
everything the command line shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from fp16bisect.artifacts.overrides import Node, Overrides
from fp16bisect.tolerance import OutputMetrics, Tolerance

if TYPE_CHECKING:  # the records behind the results, typed without loading them at import
    from fp16bisect.artifacts.apply import Verification
    from fp16bisect.artifacts.mixed import Mixed
    from fp16bisect.artifacts.verify import Check
    from fp16bisect.diagnose.drift import Drift
    from fp16bisect.diagnose.preflight import CheckOutcome
    from fp16bisect.model.graph import Graph
    from fp16bisect.run.outcome import Outcome

__all__ = ["ApplyResult", "CheckResult", "Node", "ScanResult", "ScanRow", "SearchResult"]

NAMES_SHOWN = 60  # characters of node names a repr shows before "..."


def _names(names: Iterable[str]) -> str:
    """Node names for a one-line repr: as many as fit in ``NAMES_SHOWN`` characters, then how many more."""
    names = list(names)
    shown: list[str] = []
    used = 0
    for name in names:
        if shown and used + len(name) > NAMES_SHOWN:
            break
        shown.append(name if len(name) <= NAMES_SHOWN else name[:NAMES_SHOWN - 3] + "...")
        used += len(shown[-1]) + 2
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", ... ({more} more)" if more else "")


def _accumulating(nodes: list[Node]) -> str:
    """``; 1 FP32-accumulation node: m`` ('' for none)."""
    if not nodes:
        return ""
    return (f"; {len(nodes)} FP32-accumulation node{'' if len(nodes) == 1 else 's'}: "
            f"{_names(n.name for n in nodes)}")


def _nodes(nodes: list[Node] | list[str]) -> str:
    """``2 FP32 nodes: a, b`` (``0 FP32 nodes``)."""
    names = [n if isinstance(n, str) else n.name for n in nodes]
    return f"{len(names)} FP32 node{'' if len(names) == 1 else 's'}" + (f": {_names(names)}" if names else "")


@dataclass
class SearchResult:
    """The smallest set of nodes to keep in FP32 that a search found (``fp16bisect.search``).

    Attributes:
        fp32_nodes: The nodes to keep in FP32, in suspicion order (empty when all-FP16 already passes).
        minimal: True when the set is 1-minimal: removing any single member was evaluated and fails.
        evaluations: Distinct plans the search evaluated.
        passed: True when the set was seen to pass on every sample on the judging backend.
        status: ``"found"``, or ``"fp16_passes"`` (nothing needs FP32).
        backend: The backend that judged, e.g. ``"emulate"``.
        tolerance: The tolerance every output of every sample met.
        with_overrides: Per output, the worst sample's metrics with ``fp32_nodes`` in FP32.
        all_fp16: Per output, the worst sample's metrics with every candidate in FP16.
        seconds: Wall time of the search.
        output: Where the override JSON was written (``output=`` of ``search``), or None.
        fp32_accumulate_nodes: The nodes kept in FP32 accumulation (stored in FP16, adding in FP32: the file's
            ``fp32_accumulate_nodes``), graph order; empty unless the search used that state.
        stopped: What ended the search before its end (``max_evaluations=``, ``time_limit=``, or Ctrl-C: the
            label, e.g. ``"passing, not minimal: budget reached"``; the file's ``search.stopped``), else None.
            ``fp32_nodes`` is then the smallest set seen to pass; rerun with the same ``output`` to go on.

    Examples:
        >>> import fp16bisect
        >>> result = fp16bisect.search("sample_models/transformer_block.onnx", "sample_models/transformer_block.npz")
        >>> [(n.name, n.op_type) for n in result.fp32_nodes]
        [('ln1_square', 'Mul'), ('ln1_var', 'ReduceMean')]
        >>> result.minimal, result.evaluations
        (True, 4)
        >>> str(result.write("overrides.json"))
        'overrides.json'
    """

    fp32_nodes: list[Node]
    minimal: bool
    evaluations: int
    passed: bool
    status: str
    backend: str
    tolerance: Tolerance
    with_overrides: dict[str, OutputMetrics]
    all_fp16: dict[str, OutputMetrics]
    seconds: float
    output: str | None = None
    fp32_accumulate_nodes: list[Node] = field(default_factory=list)
    stopped: str | None = None
    outcome: Outcome = field(kw_only=True, repr=False, compare=False)  # the pipeline's (console, report)
    overrides: Overrides = field(kw_only=True, repr=False, compare=False)  # the override file, typed

    def __repr__(self) -> str:
        """One line: ``SearchResult(2 FP32 nodes: a, b; minimal; 4 evaluations on emulate; passed)``."""
        found = "all-FP16 passes" if self.status == "fp16_passes" else self.stopped if self.stopped else \
            "minimal" if self.minimal else "NOT minimal"
        return (f"SearchResult({_nodes(self.fp32_nodes)}{_accumulating(self.fp32_accumulate_nodes)}; {found}; "
                f"{self.evaluations} evaluation"
                f"{'' if self.evaluations == 1 else 's'} on {self.backend}; {'passed' if self.passed else 'FAILED'})")

    @property
    def names(self) -> list[str]:
        """The node ids of ``fp32_nodes``, in order."""
        return [n.name for n in self.fp32_nodes]

    @property
    def minimum(self) -> dict | None:
        """With ``minimum=``: the smallest set's search (``proven``, ``lower_bound``, ``estimate``,
        ``contradictions``, ``evaluations``, ...: the override JSON's ``search.minimum``), else None."""
        least = self.outcome.minimum
        return least.to_json() if least is not None and least.json_key == "minimum" else None

    @property
    def improvement(self) -> dict | None:
        """Without ``minimum=``: the bounded step after the 1-minimal search that tries smaller sets (``ran``,
        ``why``, ``one_minimal``, ``size``, ``evaluations``, ``budget``: the override JSON's
        ``search.improvement``), else None."""
        step = self.outcome.minimum
        return step.to_json() if step is not None and step.json_key == "improvement" else None

    def to_dict(self, output: str | Path | None = None) -> dict:
        """The override JSON (schema ``fp16bisect.overrides/1``) as a dict: what ``write`` writes.

        Args:
            output: Where the file will be (named in its ``exports``' ``apply`` command); default: ``output``
                of the search, else ``overrides.json``.

        Returns:
            A new dict, safe to change.
        """
        where = str(output) if output is not None else self.output
        if where != self.output:
            from fp16bisect.artifacts.exports import exports_json

            graph = self.outcome.graph
            exports = exports_json(graph, [graph.by_id[n.name] for n in self.fp32_nodes], where,
                                   [graph.by_id[n.name] for n in self.fp32_accumulate_nodes])
            run = self.outcome.run  # the command that writes it there: this search's, -o that path
            command = None if run is None else run.but(where).argv()
            return self.overrides.replaced(exports=exports, search={**self.overrides.search, "command": command}) \
                .to_json()
        return self.overrides.to_json()

    def write(self, path: str | Path) -> Path:
        """Write the override JSON to ``path`` (atomically): the same content as ``fp16bisect search -o path``.

        Args:
            path: The file to write, e.g. ``"overrides.json"``; its directory is made if needed.

        Returns:
            The path written.

        Raises:
            UsageError: The path cannot be written.
        """
        from fp16bisect.artifacts.files import check_writable, write_json

        check_writable(path)
        write_json(path, self.to_dict(path))
        return Path(path)


@dataclass
class CheckResult:
    """Whether a model meets the tolerance in FP16, with the given overrides kept in FP32 (``fp16bisect.check``).

    Attributes:
        passed: True when every output of every sample meets the tolerance.
        outputs: Per output, the worst sample's metrics.
        metrics: Every (sample, output) metric, in sample order.
        fp32_passes: Whether the all-FP32 plan passes, evaluated only when the check fails (else None): False
            means no override set can pass at this tolerance.
        nodes: The override nodes kept in FP32 (those of the override file present in this model), as ``Node``
            records.
        missing: The ids of override nodes not in this model (an override file made for another version of it).
        accumulating: The override file's nodes kept in FP32 accumulation (present in this model), as ``Node``
            records.
        backend: The backend that judged.
        tolerance: The tolerance checked.
        tolerance_from: Where it comes from: ``"from <override file>"`` (its recorded tolerance, the values not
            given), ``"given"`` or ``"defaults"``.
        verdict: One line: what the check found and what to do.
        drift: With an override file, where its answer was verified against here (``diagnose.drift.Drift``:
            ``changes``, each with ``what``, ``recorded`` and ``here``; ``fails``: ``strict_environment`` failed
            the check; ``again``: the command that verifies it again; ``to_json()``); None without one.

    Examples:
        >>> import fp16bisect
        >>> model, data = "sample_models/transformer_block.onnx", "sample_models/transformer_block.npz"
        >>> result = fp16bisect.check(model, data)
        >>> result.passed, result.outputs["y"].passed
        (False, False)
        >>> print(result.verdict)
        FAIL in all-FP16: max abs error 7.72 exceeds atol 0.01 + rtol 0.01*|ref| (233x the allowance) on output 'y' ...
    """

    passed: bool
    outputs: dict[str, OutputMetrics]
    metrics: list[OutputMetrics]
    fp32_passes: bool | None
    nodes: list[Node]
    missing: list[str]
    backend: str
    tolerance: Tolerance
    verdict: str
    drift: Drift | None = None
    tolerance_from: str = "defaults"
    accumulating: list[Node] = field(default_factory=list)
    outcome: CheckOutcome = field(kw_only=True, repr=False, compare=False)  # the pipeline's (console, report)

    def __repr__(self) -> str:
        """One line: ``CheckResult(FAILED; 0 FP32 nodes; emulate; atol 0.01, rtol 0.01; all-FP32 passes)``."""
        missing = f" ({len(self.missing)} not in this model)" if self.missing else ""
        fp32 = "" if self.fp32_passes is None else "; all-FP32 passes" if self.fp32_passes else "; all-FP32 FAILS too"
        return (f"CheckResult({'passed' if self.passed else 'FAILED'}; {_nodes(self.nodes)}{missing}"
                f"{_accumulating(self.accumulating)}; "
                f"{self.backend}; {self.tolerance}{fp32})")

    @property
    def reachable(self) -> bool:
        """False when even the all-FP32 plan misses the tolerance (the command line's exit code 3)."""
        return self.fp32_passes is not False

    def to_dict(self) -> dict:
        """The JSON ``fp16bisect check --json`` writes (schema ``fp16bisect.check/1``), with the verdict line."""
        return {**self.outcome.data(), "verdict": self.verdict}


@dataclass(frozen=True)
class ScanRow:
    """A tensor or weight near the low precision's limits (a row of ``scan``).

    Attributes:
        name: The tensor's name.
        kind: ``"activation"`` or ``"weight"``.
        risk: What the low precision does to it: its tier's word, e.g. ``"overflow"``.
        tier: The risk tier, higher is riskier (3: overflow).
        max_abs: Its largest magnitude in FP32 over the samples.
        min_nonzero_abs: Its smallest non-zero magnitude (0.0 when it has none).
        reason: What happens, with numbers, e.g. ``"max |x| 1.644e+05 > 65504 (4 element(s) become inf)"``.
        written_by: The node id that writes it (``""`` for a weight or a graph input).
        overflow: Elements beyond the precision's max; ``flushed``: elements that become 0; ``subnormal``:
            elements that lose precision.
        read_by: The node ids that read it.
    """

    name: str
    kind: str
    risk: str
    tier: int
    max_abs: float
    min_nonzero_abs: float
    reason: str
    written_by: str
    overflow: int = 0
    flushed: int = 0
    subnormal: int = 0
    read_by: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, row: dict) -> ScanRow:
        """The row of ``scan --json``'s ``tensors``."""
        return cls(row["name"], row["kind"], row["risk"], row["tier"], row["max_abs"], row["min_nonzero_abs"],
                   row["reason"], row["written_by"], row.get("overflow", 0), row.get("flushed", 0),
                   row.get("subnormal", 0), tuple(row.get("read_by", ())))

    def to_json(self) -> dict:
        """The row as ``scan --json`` writes it (its keys in that order)."""
        return {"name": self.name, "kind": self.kind, "tier": self.tier, "risk": self.risk, "max_abs": self.max_abs,
                "min_nonzero_abs": self.min_nonzero_abs, "overflow": self.overflow, "flushed": self.flushed,
                "subnormal": self.subnormal, "reason": self.reason, "written_by": self.written_by,
                "read_by": list(self.read_by)}


@dataclass(frozen=True)
class ScanNode:
    """A candidate node in the search's suspicion order (``scan``'s ``nodes``).

    Attributes:
        name: The node id.
        op_type: The ONNX operator.
        tier: The risk tier of what it writes, higher is riskier (3: overflow).
        risk: The tier's word, e.g. ``"overflow"``.
        reason: Why it is suspected, with numbers.
    """

    name: str
    op_type: str
    tier: int
    risk: str
    reason: str

    @classmethod
    def from_json(cls, node: dict) -> ScanNode:
        """The entry of ``scan --json``'s ``nodes``."""
        return cls(node["name"], node["op_type"], node["tier"], node["risk"], node["reason"])

    def to_json(self) -> dict:
        """The entry as ``scan --json`` writes it."""
        return {"name": self.name, "op_type": self.op_type, "tier": self.tier, "risk": self.risk,
                "reason": self.reason}


@dataclass
class ScanResult:
    """Where a model is at risk in FP16, from one FP32 run (``fp16bisect.scan``); no search.

    Attributes:
        rows: The tensors and weights near FP16's limits, riskiest first (``ScanRow``: ``name``, ``kind``,
            ``risk``, ``tier``, ``max_abs``, ``min_nonzero_abs``, ``reason``, ``written_by``, ...).
        nodes: Every candidate node in suspicion order (``ScanNode``: ``name``, ``op_type``, ``tier``, ``risk``,
            ``reason``).
        suspects: How many of ``nodes`` the search would try first.

    Examples:
        >>> import fp16bisect
        >>> scan = fp16bisect.scan("sample_models/transformer_block.onnx", "sample_models/transformer_block.npz")
        >>> scan.rows[0].name, scan.rows[0].risk, scan.rows[0].written_by
        ('ln1_sq', 'overflow', 'ln1_square')
    """

    rows: list[ScanRow]
    nodes: list[ScanNode]
    suspects: int
    _data: dict = field(default_factory=dict, repr=False, compare=False)
    graph: Graph = field(kw_only=True, repr=False, compare=False)  # the loaded model (console)

    def __repr__(self) -> str:
        """One line: ``ScanResult(5 tensors at risk, the riskiest ln1_sq (overflow); 2 suspect nodes: a, b)``."""
        riskiest = f", the riskiest {self.rows[0].name[:NAMES_SHOWN]} ({self.rows[0].risk})" if self.rows else ""
        suspects = [n.name for n in self.nodes[:self.suspects]]
        return (f"ScanResult({len(self.rows)} tensor{'' if len(self.rows) == 1 else 's'} at risk{riskiest}; "
                f"{self.suspects} suspect node{'' if self.suspects == 1 else 's'}"
                + (f": {_names(suspects)})" if suspects else ")"))

    def to_dict(self) -> dict:
        """The JSON ``fp16bisect scan --json`` writes (schema ``fp16bisect.scan/1``)."""
        import copy

        return copy.deepcopy(self._data)


@dataclass
class ApplyResult:
    """The mixed-precision model ``fp16bisect.apply`` wrote, and its verification when asked for.

    Attributes:
        path: The ONNX file written.
        fp32_nodes: The nodes kept in FP32 in it (``Node`` records, graph order).
        fp32_accumulate_nodes: The nodes written in FP32 accumulation (FP16 storage, FP32 arithmetic between
            Casts), graph order.
        verification: With ``verify``: the written model and the all-FP16 one run on the samples against the
            references (``None`` without); ``check`` is the written model's part, ``passed`` its verdict.
        fp16_sums: With ``verify`` under ``accumulate="fp16"`` (given, or the override file's): the file's plan
            judged with FP16 sums on the emulator (a ``CheckResult``); ``None`` otherwise.

    Examples:
        >>> import fp16bisect
        >>> model, data = "sample_models/transformer_block.onnx", "sample_models/transformer_block.npz"
        >>> applied = fp16bisect.apply(model, fp16bisect.search(model, data), "mixed.onnx")
        >>> str(applied.path), [n.name for n in applied.fp32_nodes], applied.verification
        ('mixed.onnx', ['ln1_square', 'ln1_var'], None)
    """

    path: Path
    fp32_nodes: list[Node]
    verification: Verification | None = None
    fp32_accumulate_nodes: list[Node] = field(default_factory=list)
    mixed: Mixed = field(kw_only=True, repr=False, compare=False)  # what the console says was written
    fp16_sums: CheckResult | None = field(default=None, kw_only=True)  # verify under --accumulate fp16

    def __repr__(self) -> str:
        """One line: ``ApplyResult(mixed.onnx: 2 FP32 nodes: a, b; not verified)``."""
        verified = "not verified" if self.verification is None else f"verified: {'passed' if self.passed else 'FAILED'}"
        where = str(self.path) if len(str(self.path)) <= NAMES_SHOWN else "..." + str(self.path)[3 - NAMES_SHOWN:]
        return f"ApplyResult({where}: {_nodes(self.fp32_nodes)}{_accumulating(self.fp32_accumulate_nodes)}; {verified})"

    @property
    def passed(self) -> bool | None:
        """With ``verify``: whether the written model meets the tolerance on every sample (under ``--accumulate
        fp16``, also its plan with FP16 sums, ``fp16_sums``); else None."""
        if self.verification is None:
            return None
        return self.verification.passed and (self.fp16_sums is None or self.fp16_sums.passed)

    @property
    def check(self) -> Check | None:
        """With ``verify``: the written model's check (``passed``, per (sample, output) ``metrics``); else None."""
        return None if self.verification is None else self.verification.with_overrides

    @property
    def outputs(self) -> dict[str, OutputMetrics]:
        """With ``verify``: per output, the worst sample's metrics of the written model; else empty."""
        return {} if self.verification is None else self.verification.with_overrides.worst()
