"""Rounding told apart from overflow, before a long search: what the search says when all-FP16 fails for want of
precision rather than of range.

A search that ends with a few nodes (an overflow, an underflow into a Log) takes a handful of evaluations; one
where FP16's rounding, accumulated over many nodes, misses the tolerance goes on for hundreds of evaluations toward
a large set (PP-OCRv4's detector: about 200 of 329 nodes). The person waiting is told so early, with what else
they could do:

* **After the first evaluation**, when all-FP16 fails with finite outputs and the FP32 profile sees no value it
  rounds leave the range (``rounded``: BatchNormalization statistics the writer folds are not rounded): no tensor
  overflows or comes within 2x of the largest finite value, none has values that flush to 0
  while it lives below the normal range (a flushed value elsewhere is smaller than its tensor's own rounding
  step), and, when the judge adds in FP16 (``--accumulate fp16``), no sum passes the max (the accumulator
  bounds). Said: the cause (rounding, not overflow); the tolerance per output at which all-FP16 passes (from that
  evaluation's metrics: atol and rtol times the error's excess over its allowance, rounded up); the task-level
  alternatives with their command lines (``--error-stat``, ``--argmax``, ``--topk``, the API's ``accept=``).
* **After the effect ranking** (``ranking.py``, which the search runs anyway when no suspect prefix explains the
  failure; its measurements are reused, nothing is run twice): how much of the error the few most harmful nodes
  explain, and an estimate of the answer's size and evaluations (``algorithm/progress.py``: the single-node
  errors combined as the p-norm that gives the all-FP16 error). When the profile did flag values (so nothing was
  said after the first evaluation) but those few nodes explain less than ``SPREAD`` of the error, the error is
  spread over many nodes: the diagnosis is said then.

Nothing is evaluated for it: an overflow case says nothing new and costs the same evaluations. What was said goes
into the override JSON's ``diagnosis`` section.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from fp16bisect.algorithm.memo import Step
from fp16bisect.algorithm.progress import DenseEstimate, dense_estimate, dense_left
from fp16bisect.model.precision import NEAR, Precision
from fp16bisect.tolerance import GivenTolerance, OutputMetrics, Tolerance

if TYPE_CHECKING:
    from fp16bisect.evaluation.space import View

TOP = 5  # the few most harmful nodes whose share of the error is said
SPREAD = 0.5  # those explaining less than this share of the all-FP16 error: the error is spread over many nodes
SHOWN = 3  # tensors named in a line before it gives the count
INDICES = ("argmax", "topk", "exact", "accept")  # rules no tolerance value loosens (OutputMetrics.rule)


def rounded(graph, prof, fp32: frozenset) -> dict:
    """Tensor -> its FP32 measures (``TensorStats``), for every tensor the all-FP16 plan rounds: what each candidate
    not in ``fp32`` (the nodes in FP32 in every plan) reads in FP16 and writes, as the FP32 profile ranks them
    (BatchNormalization statistics the writer folds are not rounded; masks of +-3.4e38 left out)."""
    found = {}
    for node in graph.candidates:
        if node.id in fp32:
            continue
        for t in [t for _, t in graph.rounded_inputs(node)] + graph.float_outputs(node):
            s = prof.tensors.get(t)
            if s is not None and not s.sentinel:
                found[t] = s
    return found


def out_of_range(tensors: dict, prof, low: Precision, accumulate: str) -> list[str]:
    """What the FP32 profile sees leave (or come near) ``low``'s range among ``tensors`` (``rounded``), in words:
    tensors past or within ``NEAR``x of the largest finite value, tensors living below the normal range whose values
    flush to 0, and, when the judge adds in the low precision (``accumulate`` fp16), sums past the max."""
    found = [f"{name!r}: {low.describe(s)}" for name, s in tensors.items()
             if s.overflow or s.max_abs >= low.max / NEAR or (s.flushed and s.max_abs < low.smallest_normal)]
    if accumulate != "fp32":
        found += [f"the sum of {a.node!r} ({a.op_type}): peak {a.peak:.4g}" for a in prof.accumulators
                  if a.over(low)]
    return found


def passing_tolerance(metrics: dict[str, OutputMetrics], tolerance: Tolerance) -> tuple[Tolerance | None, dict]:
    """The tolerance at which these metrics (an evaluation's worst per output) pass: each failing output's atol
    and rtol times its excess over its allowance (rounded up to 3 significant digits; atol its max abs error when
    the allowance was 0), its min cosine lowered to the cosine measured; and per output what it takes (JSON).
    None when an output cannot pass by a tolerance value (NaN/inf, argmax, top-K, an accept function)."""
    given: dict[str, dict] = {}
    said: dict[str, dict] = {}
    for name, m in metrics.items():
        own = tolerance.for_output(name)
        if m.passed:
            said[name] = {"passes": True}
            continue
        if m.nonfinite or m.rule in INDICES:
            return None, {}
        values: dict = {}
        if m.excess > 1 and math.isfinite(m.excess):
            values.update(atol=_up(own.atol * m.excess), rtol=_up(own.rtol * m.excess))
        elif m.excess > 1:  # the allowance was 0 where the error is not: atol takes the error itself
            values["atol"] = _up(m.max_abs)
        if own.min_cosine is not None and m.cosine < own.min_cosine:
            values["min_cosine"] = math.floor(m.cosine * 1e6) / 1e6
        given[name] = values
        said[name] = {**values, "excess": _rounded(m.excess), "max_abs": _rounded(m.max_abs)}
    if len(metrics) == 1:
        (values,) = given.values() or [{}]
        return GivenTolerance(**values).over(tolerance), said
    return GivenTolerance(per_output=given).over(tolerance), said


def _up(x: float) -> float:
    """``x`` rounded up to 3 significant digits (0 stays 0)."""
    if x <= 0 or not math.isfinite(x):
        return x
    unit = 10.0 ** (math.floor(math.log10(x)) - 2)
    return float(f"{math.ceil(x / unit) * unit:.3g}")


def _rounded(x: float) -> float | str:
    """4 significant digits; inf and nan as the JSON's strings."""
    return float(f"{x:.4g}") if math.isfinite(x) else str(x)


def grow_start(suspects: int) -> int:
    """The first prefix the search grows from after its ranking (``search._grow_and_explain``: the suspect
    prefixes double up to twice the suspects)."""
    size = 1
    while size < 2 * suspects:
        size = min(size, suspects) * 2
    return size


ALTERNATIVES = (  # (flag, what it judges, its value: {output} the first failing output): each a search of its own
    ("--error-stat", "a statistic of the error within the allowance instead of its max: p99 lets 1% of the "
                     "elements exceed", "p99"),
    ("--argmax", "class scores: the argmax along the last axis", "{output}:-1"),
    ("--topk", "rankings: the top-5 indices along the last axis", "{output}:5:-1"),
)


class Run(Protocol):
    """The search as asked (``run/invocation.py``'s ``Invocation``), rendering the commands the diagnosis prints."""

    def all_fp16(self, tolerance: Tolerance) -> Any: ...  # the check of all-FP16 at ``tolerance``

    def judged_by(self, tolerance: Tolerance, tag: str) -> Any: ...  # this search at ``tolerance``, beside its answer


def my_metric(outputs: dict, reference: dict) -> bool:
    """The name the ``accept=`` alternative is shown with: the caller's own metric, per sample."""
    raise NotImplementedError("write your own: (outputs, reference) -> bool")


class Diagnosis:
    """Follows one search (its steps through ``watch``, its ranking as a ``ranking.Watcher``) and says, once,
    when its all-FP16 failure is rounding (the module's docstring); ``to_json`` is what it said (None: nothing)."""

    def __init__(self, graph, prof, judge: View, *, run: Run, listener, accumulate: str = "fp32", prior=None,
                 ranks: bool = False):
        """``judge``: the view of the judge the search asks (its fixed members in every plan); ``run``: the search
        as asked, whose printed commands (a check, the alternatives' searches) are rendered from it."""
        self.graph, self.prof, self.judge, self.run, self.listener = graph, prof, judge, run, listener
        self.low: Precision = graph.precision
        self.accumulate, self.prior = accumulate, prior
        self.ranks = ranks  # the search ranks by effect when no suspect prefix explains the failure
        self.found: dict | None = None  # what was said (the JSON section)
        self.estimate: DenseEstimate | None = None
        self.seen = 0  # evaluations the search has made (its steps)
        self.ranked_after: int | None = None  # evaluations made when the ranking ended

    def watch(self, step):
        """``step`` (what the search calls after each evaluation) with the diagnosis after the all-FP16 plan's
        failure, and the progress counting the ranking to come and, once ranked, the estimate."""
        def watched(s: Step, progress: dict) -> None:
            self.seen = max(self.seen, s.index)
            if self.estimate is not None and self.ranked_after is not None:
                progress = {**progress, "estimate_left": dense_left(self.estimate, s.index - self.ranked_after,
                                                                    progress)}
            elif self.found is not None and self.ranks and progress["phase"] in ("precondition", "suspects"):
                progress = {**progress, "ranking_runs": self._runs}  # the ranking comes before the next prefix
            step(s, progress)
            if not s.plan and s.passed is False and self.found is None:
                self._after_fp16(s.index)

        return watched

    @property
    def _runs(self) -> int:
        return len(self.prof.order) * len(self.judge.samples)

    def _fp16(self):
        """The all-FP16 plan's evaluation when it failed on finite, measured outputs (else None: not rounding's
        to say)."""
        e = self.judge.known(frozenset())
        if e is None or e.reason is not None or e.passed or not e.metrics or any(m.nonfinite for m in e.metrics):
            return None
        return e

    def _rounded(self) -> dict:
        return rounded(self.graph, self.prof, self.judge.forced)

    def _after_fp16(self, index: int) -> None:
        e = self._fp16()
        if e is None or out_of_range(self._rounded(), self.prof, self.low, self.accumulate):
            return
        self._say_cause(index, "range", self._why_in_range(), e)
        if self.ranks:
            self._say(f"next{', if no suspect prefix explains it' if self.prof.suspects else ''}: ranking the "
                      f"{len(self.prof.order)} candidate(s) by the error each causes alone ({self._runs} run(s) of "
                      "the model, each about as long as one evaluation), then an estimate of the answer; the search "
                      "goes on")
        elif self.prior is not None:
            # the judge starts from the emulator's set, or the smaller one its step found (strategy/improve.py)
            k = len((self.prior.improvement or {}).get("fp32") or self.prior.fp32)
            self._said["estimate"] = {"fp32_nodes": k, "evaluations": k + 2, "from": "the emulator's prior"}
            self._say(f"estimate: about {k} node(s) in FP32, the emulator's set, and {k + 2} evaluation(s) if this "
                      "judge agrees with it; the search goes on")

    def _why_in_range(self) -> str:
        tensors = list(self._rounded().items())
        name, top = max(((n, s.max_abs) for n, s in tensors), key=lambda t: t[1], default=("", 0.0))
        flushed = sum(1 for _, s in tensors if s.flushed)
        why = (f"no tensor all-{self.low.label} rounds comes within {NEAR:g}x of {self.low.max_text} (the FP32 "
               f"profile's highest peak: "
               f"{top:.4g} at {name!r}, {top / self.low.max:.1%} of it)")
        why += (f"; the values that flush to 0 (in {flushed} tensor(s)) are below their tensors' own rounding step"
                if flushed else "; no value flushes to 0")
        over = [a for a in self.prof.accumulators if a.over(self.low)]
        if over and self.accumulate == "fp32":
            why += (f"; {len(over)} sum(s) would pass {self.low.max_text} if added in {self.low.label}, which this "
                    "search does not model (--accumulate fp32)")
        return why + "; the outputs stay finite"

    @property
    def _said(self) -> dict:
        """What was said so far (the JSON section), once the cause was."""
        assert self.found is not None, "the cause is said first"
        return self.found

    def _say(self, text: str) -> None:
        self.listener.stage(f"diagnosis: {text}")

    def _say_cause(self, index: int, trigger: str, why: str, e) -> None:
        """The cause, the tolerance at which all-FP16 passes, the task-level alternatives: said, and kept."""
        low = self.low.label
        cause = f"all-{low} fails by rounding, not overflow: {why}" if trigger == "range" else \
            f"all-{low} fails mostly by rounding spread over many nodes: {why}"
        self._say(cause)
        self.found = {"cause": "rounding", "trigger": trigger, "said_after_evaluation": index, "why": why}
        self._say_tolerance(e)
        self._say_alternatives(e)

    def _say_tolerance(self, e) -> None:
        worst = e.worst()
        tolerance, outputs = passing_tolerance(worst, self.judge.tolerance)
        if tolerance is None:
            return
        ran, total = len(e.samples), len(self.judge.samples)
        where = f"on the {ran} of {total} sample(s) it ran (a failing plan stops at its first failing sample)" \
            if ran < total else f"on the {total} sample(s)"
        times = "; ".join(f"{name!r} {m.excess:.3g}x its allowance" if math.isfinite(m.excess) else
                          f"{name!r} {m.max_abs:.3g} where its allowance is 0" for name, m in worst.items()
                          if not m.passed)
        command = self.run.all_fp16(tolerance).shown()
        self._say(f"all-{self.low.label} passes at {tolerance} ({times}) {where}"
                  + (f": {command}" if command else ""))
        self._said["passing_tolerance"] = {"tolerance": tolerance.to_json(), "outputs": outputs,
                                           "samples_run": ran, "samples": total, "check": command}

    def _say_alternatives(self, e) -> None:
        """The flags for the first failing output judged by its values (an output judged by its indices or a
        function has its task's rule already; one judged by a statistic is not offered --error-stat again), and
        the API's ``accept=``."""
        failing = next((m for m in e.metrics if not m.passed and m.rule not in INDICES), None)
        found = []
        self._say("or judge what the task needs (each a search of its own):")
        offered = [] if failing is None else [(flag, what, value.format(output=failing.output))
                                              for flag, what, value in ALTERNATIVES
                                              if flag != "--error-stat" or not failing.rule]
        for flag, what, value in offered:
            rule: dict[str, Any] = {flag[2:].replace("-", "_"): value}
            tolerance = GivenTolerance(**rule).over(self.judge.tolerance)
            again = self.run.judged_by(tolerance, flag[2:])
            command, api = again.argv(), again.call()
            found.append({"flag": flag, "judges": what, "command": command and shlex.join(command), "api": api})
            self.listener.stage(f"  {flag}: {what}: {again.shown()}")
        accept = self.run.judged_by(replace(self.judge.tolerance, accept=my_metric), "accept").call()
        found.append({"flag": "accept=", "judges": "your own metric: my_metric(outputs, reference) -> bool, per "
                      "sample (the Python API)", "command": None, "api": accept})
        self.listener.stage(f"  accept= (Python API): your own metric, my_metric(outputs, reference) -> bool per "
                            f"sample: {accept}")
        self._said["alternatives"] = found

    def ranked(self, measured: dict[str, float], seconds: float) -> None:
        """The effect ranking's measurements (``ranking.Watcher``): the share the few most harmful nodes explain, the estimate, and the
        diagnosis itself when the error is spread over many nodes and nothing was said before."""
        self.ranked_after = self.seen
        e = self._fp16()
        if e is None:
            return
        total = max(m.excess for m in e.metrics)
        estimate = dense_estimate(list(measured.values()), total, top=TOP, start=grow_start(self.prof.suspects))
        worst = sorted(measured.items(), key=lambda kv: -kv[1])[:estimate.top]
        share = (f"the {estimate.top} most harmful node(s) explain {estimate.explained:.0%} of the error (each alone "
                 f"in {self.low.label}: {', '.join(f'{v:.3g}x' for _, v in worst)} the allowance; all-"
                 f"{self.low.label}: {total:.3g}x)")
        measurable = math.isfinite(total)  # else an allowance of 0 somewhere: no share of an infinite error
        spread = measurable and estimate.explained < SPREAD
        if self.found is None:
            if not spread:
                return
            flagged = out_of_range(self._rounded(), self.prof, self.low, self.accumulate)
            self._say_cause(self.seen, "spread", f"{share}; the FP32 profile's {self.prof.suspects} suspect(s) "
                            f"({', '.join(flagged[:SHOWN])}{', ...' if len(flagged) > SHOWN else ''}) do not "
                            "explain it: with all of them in FP32 it still fails", e)
            self._said["out_of_range"] = flagged[:10]
        elif measurable:
            self._say(share + (": the error is spread over many nodes" if spread else ""))
        self.estimate = estimate
        candidates = len(measured)
        runs = candidates * len(self.judge.samples)
        history = [e for e in self.judge.history if e.samples]
        per = sum(len(e.samples) for e in history) / len(history) if history else 1.0  # samples an evaluation runs
        pace = seconds / runs * per if runs else 0.0  # the ranking's runs: its warm session's pace
        self._say(f"estimate: about {estimate.fp32} of {candidates} node(s) in FP32 ({self.low.label} keeps "
                  f"{candidates - estimate.fp32}), roughly {estimate.evaluations} more evaluation(s)"
                  + (f" (about {estimate.evaluations * pace:.0f} s at the ranking's pace)" if estimate.evaluations * pace >= 1
                     else "")
                  + f"; from the single-node errors combined as a {_exponent(estimate.exponent)}, not a claim")
        self._said["ranking"] = {"runs": runs, "seconds": round(seconds, 3),
                                 "most_harmful": [{"node": n, "excess": _rounded(v)} for n, v in worst],
                                 "explained": round(estimate.explained, 4) if measurable else None,
                                 "spread": spread}
        self._said["estimate"] = {"fp32_nodes": estimate.fp32, "candidates": candidates,
                                  "evaluations": estimate.evaluations, "exponent": _rounded(estimate.exponent),
                                  "from": "the effect ranking"}

    def to_json(self) -> dict | None:
        return self.found


def _exponent(p: float) -> str:
    """How the errors combine, in words."""
    if math.isinf(p):
        return "maximum"
    return "sum (they add up)" if p <= 1.0 else f"{p:.2g}-norm (2: independent errors)"
