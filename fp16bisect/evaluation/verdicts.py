"""What one evaluation of a plan found (``Evaluation``: the verdict, the metrics of the samples run, the seconds) and
why a plan could not be evaluated (``Reason``), with their JSON: the journal's lines, the override file's trace.

Made by ``oracle.py`` (and by worker processes, ``fp16bisect.parallel``), written and read back by ``journal.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from fp16bisect.errors import CouldNotEvaluate, ReasonKind
from fp16bisect.tolerance import OutputMetrics, worst_per_output


@dataclass(frozen=True)
class Reason:
    """Why a plan could not be evaluated: neither pass nor fail, and never evidence."""

    kind: ReasonKind  # build (a build or run failed) | cannot_evaluate (a command's exit 125) | outputs (outputs that do
    # not fit the references) | pins_ignored (a weakly typed build dropped FP32 pins) | died (a worker died, or
    # the process died evaluating it: fp16bisect.evaluation.journal)
    message: str
    pins: tuple = ()  # pins_ignored: (node, engine layer) pairs

    def to_json(self) -> dict:
        return {"kind": self.kind, "message": self.message, **({"pins": [list(p) for p in self.pins]} if self.pins
                                                                else {})}

    @classmethod
    def from_json(cls, data: str | dict) -> Reason:
        if isinstance(data, str):  # journals written before reasons were data
            return cls("build", data)
        pins = tuple(tuple(p) for p in data.get("pins", ()))
        return cls(cast(ReasonKind, str(data["kind"])), str(data["message"]), pins)

    @classmethod
    def of(cls, exc: CouldNotEvaluate) -> Reason:
        return cls(exc.kind, str(exc), tuple(exc.pins))


VerdictFrom = Literal["outputs", "exit_code"]  # where an evaluation's verdict came from
OUTPUTS: VerdictFrom = "outputs"
EXIT_CODE: VerdictFrom = "exit_code"


@dataclass(frozen=True)
class Evaluation:
    plan: frozenset
    passed: bool
    metrics: tuple  # OutputMetrics, one per (repeat, sample, output); empty when the verdict is an exit code
    seconds: float
    reason: Reason | None = None  # the plan could not be evaluated (then passed is False and verdict None)
    flaky: bool = False  # repeats disagreed: some passed, some failed
    verdict_from: str = OUTPUTS  # OUTPUTS: the metrics under the tolerance; EXIT_CODE: the backend's bare verdict
    detail: str = ""  # with EXIT_CODE: what the verdict rests on (the exit code, the command's last stderr line)
    samples: tuple = ()  # the sample indices run, in order (a failing plan stops at its first failing sample)

    @property
    def failed_on(self) -> int | None:
        """The first sample that failed the plan (None: none failed, or an exit code failed several samples at
        once)."""
        if self.verdict_from == EXIT_CODE:
            lone = not self.passed and self.reason is None and len(self.samples) == 1
            return self.samples[0] if lone else None
        return next((m.sample for m in self.metrics if not m.passed), None)

    @property
    def error(self) -> str:
        """The message of why the plan could not be evaluated ("" when it was)."""
        return self.reason.message if self.reason is not None else ""

    @property
    def verdict(self) -> bool | None:
        """True pass, False fail, None could not evaluate."""
        return None if self.reason is not None else self.passed

    def worst(self) -> dict[str, OutputMetrics]:
        return worst_per_output(list(self.metrics))

    def to_json(self) -> dict:
        entry = {"plan": sorted(self.plan), "passed": self.passed, "seconds": round(self.seconds, 4),
                 "error": self.error, "flaky": self.flaky, "metrics": [m.to_json() for m in self.metrics]}
        if self.reason is not None:
            entry["reason"] = self.reason.to_json()
        if self.verdict_from != OUTPUTS:
            entry["verdict_from"] = self.verdict_from
        if self.detail:
            entry["detail"] = self.detail
        if self.samples:
            entry["samples"] = list(self.samples)
        return entry

    @classmethod
    def from_json(cls, entry: dict) -> Evaluation:
        metrics = tuple(OutputMetrics(**{k: _number(v) for k, v in m.items()}) for m in entry.get("metrics", []))
        reason = entry.get("reason") or entry.get("error") or None
        return cls(frozenset(entry["plan"]), bool(entry["passed"]), metrics, float(entry.get("seconds", 0.0)),
                   Reason.from_json(reason) if reason else None, bool(entry.get("flaky", False)),
                   str(entry.get("verdict_from", OUTPUTS)), str(entry.get("detail", "")),
                   tuple(int(i) for i in entry.get("samples", ())))


def _number(value: Any) -> Any:  # a JSON value
    """A metric as read back from JSON: the infinities and NaN were written as strings."""
    return float(value) if value in ("inf", "-inf", "nan") else value
