"""What the Python API returns: typed results of ``search``, ``check``, ``scan`` and ``apply``.

Each result holds plain values (node names, metrics, verdicts) to read and assert on, and ``to_dict()``: the JSON
the command line writes for the same run. The pipeline's own record stays reachable (``outcome``) for the console
and the HTML report; it is not part of the stable interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fp16bisect.tolerance import OutputMetrics, Tolerance


@dataclass(frozen=True)
class Node:
    """One ONNX node kept in FP32.

    Attributes:
        name: fp16bisect's node id: the ONNX node name when it is non-empty and unique, else its first output
            tensor's name.
        op_type: The ONNX operator, e.g. ``"Mul"``.
        outputs: The node's output tensor names, to find it in the original model.
    """

    name: str
    op_type: str
    outputs: tuple[str, ...]


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
    outcome: Any = field(default=None, repr=False, compare=False)  # the pipeline's Outcome (console, report)
    _data: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def names(self) -> list[str]:
        """The node ids of ``fp32_nodes``, in order."""
        return [n.name for n in self.fp32_nodes]

    def to_dict(self, output: str | Path | None = None) -> dict:
        """The override JSON (schema ``fp16bisect.overrides/1``) as a dict: what ``write`` writes.

        Args:
            output: Where the file will be (named in its ``exports``' ``apply`` command); default: ``output``
                of the search, else ``overrides.json``.

        Returns:
            A new dict, safe to change.
        """
        import copy

        data = copy.deepcopy(self._data)
        where = str(output) if output is not None else self.output
        if where != self.output and self.outcome is not None:
            from fp16bisect.artifacts.exports import exports_json

            graph = self.outcome.graph
            data["exports"] = exports_json(graph, [graph.by_id[n.name] for n in self.fp32_nodes], where)
        return data

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
        nodes: The override nodes kept in FP32 (those of the override file present in this model).
        missing: Override nodes not in this model (an override file made for another version of it).
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
    nodes: list[str]
    missing: list[str]
    backend: str
    tolerance: Tolerance
    verdict: str
    drift: Any = None
    tolerance_from: str = "defaults"
    outcome: Any = field(default=None, repr=False, compare=False)  # the pipeline's CheckOutcome (console, report)

    @property
    def reachable(self) -> bool:
        """False when even the all-FP32 plan misses the tolerance (the command line's exit code 3)."""
        return self.fp32_passes is not False

    def to_dict(self) -> dict:
        """The JSON ``fp16bisect check --json`` writes (schema ``fp16bisect.check/1``), with the verdict line."""
        return {**self.outcome.data(), "verdict": self.verdict}


@dataclass
class ScanResult:
    """Where a model is at risk in FP16, from one FP32 run (``fp16bisect.scan``); no search.

    Attributes:
        rows: The tensors and weights near FP16's limits, riskiest first: dicts with ``name``, ``kind``, ``risk``,
            ``tier``, ``max_abs``, ``min_nonzero_abs``, ``reason``, ``written_by``.
        nodes: Every candidate node in suspicion order: dicts with ``name``, ``op_type``, ``tier``, ``risk``,
            ``reason``.
        suspects: How many of ``nodes`` the search would try first.

    Examples:
        >>> import fp16bisect
        >>> scan = fp16bisect.scan("sample_models/transformer_block.onnx", "sample_models/transformer_block.npz")
        >>> scan.rows[0]["name"], scan.rows[0]["risk"], scan.rows[0]["written_by"]
        ('ln1_sq', 'overflow', 'ln1_square')
    """

    rows: list[dict]
    nodes: list[dict]
    suspects: int
    _data: dict = field(default_factory=dict, repr=False, compare=False)
    graph: Any = field(default=None, repr=False, compare=False)  # the loaded model (console)

    def to_dict(self) -> dict:
        """The JSON ``fp16bisect scan --json`` writes (schema ``fp16bisect.scan/1``)."""
        import copy

        return copy.deepcopy(self._data)


@dataclass
class ApplyResult:
    """The mixed-precision model ``fp16bisect.apply`` wrote, and its verification when asked for.

    Attributes:
        path: The ONNX file written.
        fp32_nodes: The node ids kept in FP32 in it.
        verification: With ``verify``: the written model and the all-FP16 one run on the samples against the
            references (``None`` without); ``check`` is the written model's part, ``passed`` its verdict.

    Examples:
        >>> import fp16bisect
        >>> model, data = "sample_models/transformer_block.onnx", "sample_models/transformer_block.npz"
        >>> applied = fp16bisect.apply(model, fp16bisect.search(model, data), "mixed.onnx")
        >>> str(applied.path), applied.fp32_nodes, applied.verification
        ('mixed.onnx', ['ln1_square', 'ln1_var'], None)
    """

    path: Path
    fp32_nodes: list[str]
    verification: Any = None  # artifacts.apply.Verification
    mixed: Any = field(default=None, repr=False, compare=False)  # artifacts.mixed.Mixed (console)

    @property
    def passed(self) -> bool | None:
        """With ``verify``: whether the written model meets the tolerance on every sample; else None."""
        return None if self.verification is None else self.verification.passed

    @property
    def check(self):
        """With ``verify``: the written model's check (``passed``, per (sample, output) ``metrics``); else None."""
        return None if self.verification is None else self.verification.with_overrides

    @property
    def outputs(self) -> dict[str, OutputMetrics]:
        """With ``verify``: per output, the worst sample's metrics of the written model; else empty."""
        return {} if self.verification is None else self.verification.with_overrides.worst()
