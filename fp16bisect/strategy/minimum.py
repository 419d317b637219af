"""``search --minimum [N]``: after the 1-minimal answer, the smallest passing set (``algorithm/hitting.py``) on an
oracle, seeded with every plan that oracle has evaluated; what it found, and how the answer says it.

On a cheap judge (the emulator) the loop runs on the judge's own oracle, and the set it finds is certified there
like any start set (``search(..., start=)``: each single removal evaluated). On an expensive judge (a backend with
the emulator as prior) it runs on the prior's oracle, seeded with the emulator's search, and its set is the start
set the judge certifies (k + 2 evaluations when they agree, as with the prior's own set): the lower bound is then
the emulator's, and the answer says so.

Budget: ``AUTO`` is ``BUDGET_FACTOR`` times the 1-minimal search's evaluations on that oracle (at least
``BUDGET_AT_LEAST``): issue 36's target is a proof within 3x the search, and the loop is opt-in, so a budget that
scales with what the user already paid for keeps its cost predictable; ``--minimum N`` gives N.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Collection, Literal, Mapping, Sequence, Union

from fp16bisect.algorithm.hitting import Minimum, MinimumResult, Weights, minimum, weight
from fp16bisect.errors import UsageError
from fp16bisect.model.cost import measured, node_costs, shared_casts
from fp16bisect.strategy.hitting_solver import hitting_set
from fp16bisect.strategy.improve import Evidence, Seen, said_each

__all__ = ["AUTO", "Least", "budget", "checked", "least", "wanted"]

AUTO: Literal["auto"] = "auto"
BUDGET_FACTOR = 3
BUDGET_AT_LEAST = 20
PASSING_SHOWN = 20  # passing sets the JSON lists (the lightest first)

Setting = Union[int, Literal["auto"], None]  # SearchOptions.minimum: None (off), AUTO or a number of evaluations
OBJECTIVES = ("nodes", "cost")  # --objective: the fewest nodes, or the least estimated cost (model/cost.py)


def objective(value) -> str:
    """``--objective``'s value, validated once."""
    if value not in OBJECTIVES:
        raise UsageError(f"objective {value!r}: use one of {', '.join(OBJECTIVES)}")
    return str(value)


@dataclass(frozen=True)
class Wanted:
    """What ``--minimum`` and ``--objective`` ask of the search: the budget setting and the per-node weights
    (empty: every node weighs 1, the node count)."""

    setting: Setting
    costs: Mapping = field(default_factory=dict)
    measured: frozenset = frozenset()  # nodes whose cost rests on engine profiles (the rest: model/cost.py's estimate)

    @property
    def objective(self) -> str:
        return "cost" if self.costs else "nodes"


def wanted(setting: Setting, objective_: str, graph, prof, backend, samples: Sequence,
           say: Callable[[str], None] = print) -> Wanted:
    """What the options ask, with the cost objective's per-node costs: on a backend that times its engines' layers
    (``times_layers``: TensorRT's profiler), the all-FP16 and all-FP32 engines are timed on the first sample and a
    node timed in both costs their difference (``cost.measured``); the others keep the estimate."""
    if objective_ != "cost":
        return Wanted(setting)
    timed: dict = {}
    if backend is not None and backend.times_layers and samples:
        say("--objective cost: timing each layer of the all-FP16 and the all-FP32 engines (the engine profile)")
        inputs = samples[0].inputs
        timed = measured(backend.layer_times(frozenset(), inputs),
                              backend.layer_times(frozenset(n.id for n in graph.candidates), inputs))
    costs = Weights(node_costs(graph, prof, timed=timed), shared_casts(graph, prof))
    return Wanted(setting, costs, frozenset(timed))


def checked(value) -> Setting:
    """``--minimum [N]``'s value, validated once (the options, the API and manifests all come through here)."""
    if value is None or value is False:
        return None
    if value is True or value == AUTO:
        return AUTO
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UsageError(f"minimum {value!r}: give a number of evaluations (0 or more) or 'auto' "
                         f"({BUDGET_FACTOR}x the 1-minimal search's evaluations)")
    return value


def budget(setting: Setting, evaluations: int) -> int:
    """The loop's evaluations at most: N, or ``AUTO``'s share of the 1-minimal search's ``evaluations``."""
    if setting == AUTO:
        return max(BUDGET_AT_LEAST, BUDGET_FACTOR * int(evaluations))
    return int(setting or 0)


@dataclass(frozen=True)
class Least:
    """What the loop found: its set, its verdict on it, where it ran and what it started from."""

    fp32: frozenset  # the smallest passing set found (the set the judge certifies next)
    found: MinimumResult
    on: str  # the backend the loop evaluated on ("emulate (prior)" on an expensive judge)
    judge: str  # the judging backend
    one_minimal: int  # the 1-minimal answer's size the loop started from
    budget: int
    costs: Mapping = field(default_factory=dict)  # node -> estimated cost (the cost objective), else empty
    one_minimal_cost: float | None = None  # with costs: the 1-minimal answer's
    nodes: MinimumResult | None = None  # with costs: the node-minimal set's search (before the cheapest's)
    measured: frozenset = frozenset()  # with costs: the nodes whose cost was timed (engine profiles)

    @property
    def on_prior(self) -> bool:
        return self.on != self.judge

    json_key = "minimum"  # the override JSON's search.minimum (the default step's record is search.improvement)
    label = "--minimum"  # the console line's
    ran = True  # as the default step's record says whether it evaluated anything: the console's line, always

    def to_json(self) -> dict:
        found = self.found
        return {"proven": found.proven, "lower_bound": _number(found.lower_bound),
                "smaller_failed": max(0, found.smaller_failed), "estimate": _number(found.estimate),
                "estimate_met": found.estimate_met, "contradictions": found.contradictions,
                "evaluations": found.evaluations, "explored": found.explored,
                "assumes_monotone": False, "contradicted": found.contradicted,
                "budget": self.budget, "backend": self.on, "one_minimal": self.one_minimal,
                "size": len(self.fp32), "objective": "cost" if self.costs else "nodes",
                **({"cost_us": _rounded(_cost(self.fp32, self.costs)),
                    "one_minimal_cost_us": _rounded(self.one_minimal_cost or 0.0),
                    "fewest_nodes": len(self.fewest()),
                    "fewest_nodes_proven": bool(self.nodes is not None and self.nodes.proven
                                                and len(self.nodes.fp32 or ()) == len(self.fewest())),
                    "fewest_nodes_cost_us": _rounded(_cost(self.fewest(), self.costs)),
                    "costs_measured": len(self.measured), "costs_estimated": len(self.costs) - len(self.measured),
                    "measured_nodes": sorted(map(str, self.measured))} if self.costs else {}),
                "passing": [{"size": len(p), "fp32": sorted(map(str, p)),
                             **({"cost_us": _rounded(_cost(p, self.costs))} if self.costs else {})}
                            for p in found.passing[:PASSING_SHOWN]],
                **({"passing_total": len(found.passing)} if len(found.passing) > PASSING_SHOWN else {})}

    def certified(self, final: Collection) -> "Least":
        """After the judge certified ``fp32`` (each single removal evaluated): when it dropped members (verdicts
        are not monotone there), its set is the answer, and a proof or estimate of the heavier set is void."""
        final = frozenset(final)
        if final == self.fp32 or _cost(final, self.costs) >= _cost(self.fp32, self.costs) - 1e-9:
            return self
        found, cost = self.found, _cost(final, self.costs)
        refuted = found.proven or found.estimate_met or cost < found.estimate - 1e-9
        passing = sorted({*found.passing, final}, key=lambda p: (_cost(p, self.costs), len(p), sorted(map(str, p))))
        return replace(self, fp32=final, found=replace(
            found, fp32=final, proven=False, estimate_met=False, passing=passing,
            contradictions=found.contradictions + (1 if refuted else 0),
            smaller_failed=min(found.smaller_failed, len(final) - 1),
            lower_bound=min(found.lower_bound, cost), estimate=min(found.estimate, cost)))

    def fewest(self) -> frozenset:
        """The passing set with the fewest nodes seen (the cheapest among those)."""
        return min(self.found.passing or [self.fp32], key=lambda p: (len(p), _cost(p, self.costs)))

    def _fewest_said(self) -> str:
        fewest, nodes = self.fewest(), self.nodes
        proven = nodes is not None and nodes.proven and len(nodes.fp32 or ()) == len(fewest)
        return (f"the fewest nodes that pass, {len(fewest)}{' (proven)' if proven else ' (seen)'}, cost "
                f"{_cost(fewest, self.costs):.3g} us")

    def line(self, final: Collection) -> str:
        """What the console says: "3 node(s): the minimum (every set of 2 or fewer nodes was evaluated and failed)",
        or what was found and the estimate, with the assumption it rests on named."""
        found, k = self.found, len(self.fp32)
        if self.costs:
            return self._cost_line(final)
        if found.proven:
            said = (f"{k} node(s): the minimum (every set of {k - 1} or fewer nodes was evaluated and failed)" if k > 1
                    else "1 node: the minimum (the all-FP16 plan fails)" if k == 1 else "0 nodes: the minimum")
        else:
            said = f"{k} node(s): no smaller set found" + self._unproven(f"at least {_number(found.lower_bound)}",
                                                                           str(_number(found.estimate)))
        said += f"; the 1-minimal search kept {self.one_minimal}; {found.evaluations} more evaluation(s)"
        return said + self._where(final)

    def _unproven(self, at_least: str, estimate: str) -> str:
        """What stands beside a set not proven the minimum: what the verdicts prove (``at_least``), the estimate and
        the assumption it rests on, how often the verdicts contradict that assumption, and whether the budget ran
        out."""
        found = self.found
        said = ""
        if found.smaller_failed >= 1:
            said += f"; {at_least} (every set of {found.smaller_failed} or fewer nodes was evaluated and failed)"
        said += (f"; a bound of {estimate} holds only if keeping more nodes in FP32 never hurts, "
                 + (f"which this model's verdicts contradict {found.contradictions} time(s)" if found.contradictions
                    else "an assumption no verdict here contradicts, not a proof"))
        if found.evaluations >= self.budget:
            said += f"; the budget of {self.budget} evaluation(s) ran out"
        return said

    def _where(self, final: Collection) -> str:
        if not self.on_prior:
            return ""
        said = f" on the emulator, whose verdicts these are; certified on the {self.judge} backend"
        return said + (f", which kept {len(final)} node(s) instead" if frozenset(final) != self.fp32 else "")

    def _cost_line(self, final: Collection) -> str:
        """The cost objective: "2 node(s) costing 3.2 us (estimated): the cheapest (...)"."""
        found, cost = self.found, _cost(self.fp32, self.costs)
        how = f"{len(self.measured)} node(s) timed, the rest estimated" if self.measured else "estimated"
        said = f"{len(self.fp32)} node(s) costing {cost:.3g} us ({how}, objective cost)"
        if found.proven:
            said += ": the cheapest (every cheaper set was evaluated and failed)"
        else:
            said += ": no cheaper set found" + self._unproven(f"the cheapest costs at least {found.lower_bound:.3g} us",
                                                              f"{found.estimate:.3g} us")
        said += (f"; the 1-minimal search's {self.one_minimal} node(s) cost {self.one_minimal_cost or 0:.3g} us; "
                 f"{self._fewest_said()}; {found.evaluations} more evaluation(s)")
        return said + self._where(final)


def least(ids: Sequence, oracle, one_minimal: Sequence, wanted: Wanted, evidence: Evidence, *, on: tuple[str, str],
          evaluations: int, say: Callable[[str], None] = print) -> Least | None:
    """The loop on ``oracle`` (a plan -> True | False | None callable with a ``memo`` of what it evaluated),
    seeded with that memo; ``evidence``: the candidates' order, and what says whether FP16 errors cancel here
    (``improve.py``'s rule: then the search beyond the hitting-set model goes first); ``on``: (the backend it
    evaluates on, the judge's);
    ``evaluations``: the 1-minimal search's there (for ``AUTO``'s budget); ``say``: a line per evaluation. None
    when the 1-minimal answer is empty (nothing to minimise)."""
    if not one_minimal:
        return None
    spend, costs = budget(wanted.setting, evaluations), wanted.costs
    seen = Seen(ids, oracle)
    cancel, _ = seen.spread(one_minimal, evidence)
    passes = said_each(oracle, "--minimum", spend, on[0], say)
    given = Minimum(list(ids), hitting_set, spend, known=seen.verdicts, excess=seen.excess, explore_first=cancel,
                    order=[c for c in evidence.order if c in set(ids)])
    fewest = None
    if costs:  # the node-minimal set first (its cost is reported beside the cheapest), then the cheapest, seeded
        fewest = minimum(passes, given)
        given = replace(given, known=Seen(ids, oracle).verdicts, weights=costs)
    found = minimum(passes, given)
    if fewest is not None:
        found.evaluations += fewest.evaluations
    best = found.fp32 if found.fp32 is not None else frozenset(one_minimal)
    if _cost(best, costs) > _cost(one_minimal, costs):  # never worse than the answer already had
        best = frozenset(one_minimal)
    return Least(best, found, on[0], on[1], len(one_minimal), spend, costs,
                 _cost(one_minimal, costs) if costs else None, fewest, wanted.measured)


def _cost(plan, costs: Mapping) -> float:
    """A set's cost: its members' less the Casts adjacent members share (``Weights``), or its size."""
    return weight(plan, costs) if costs else float(len(plan))


def _rounded(x: float) -> float:
    return round(float(x), 3)


def _number(x: float):
    return int(x) if float(x).is_integer() else round(float(x), 6)
