"""The emulator as a free prior for an expensive backend (an engine build, a user's command per plan).

On a non-emulate backend the whole search first runs on the emulate backend
(ONNX Runtime CPU, milliseconds a plan, its own journal beside ``-o``:
``*.prior.journal-<key>.jsonl``), ending as every search does with each single
removal of its set evaluated directly (FP16 rounding is not always monotone;
on the emulator that check is free). Its set S and its evidence (S first,
then every other candidate ranked by the output error it causes alone in
FP16, see ``ranking.py``) are handed to the search on the expensive backend,
which certifies S there (all-FP16, S, then each of its k single removals:
k + 2 evaluations when the two agree, see ``algorithm/search.py``) or
continues from it (``search(..., start=S)``). The expensive backend is always
the judge. When S fails there, ``alternatives.py`` offers the emulator's
other answers; whether the prior runs at all is ``prior_choice.py``'s call.

This module holds the prior's record (``Prior``) and runs it (``run``). The
prior's result is written into the expensive backend's journal before the
first expensive evaluation, so an interrupted search resumes from there
without the emulator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from fp16bisect.algorithm.search import Hooks, search
from fp16bisect.evaluation.journal import Journal
from fp16bisect.evaluation.oracle import Oracle
from fp16bisect.evaluation.space import View
from fp16bisect.strategy import ranking

LABEL = "emulate (prior)"


@dataclass
class Prior:
    fp32: tuple  # the emulator's set, in its order (empty when all-FP16 passed there)
    order: list  # for the expensive search: the set first, then the other candidates by measured effect
    status: str  # the emulator search's status: found | fp16_passes
    evaluations: int  # on the emulator
    seconds: float
    minimal: bool
    fp16: dict = field(default_factory=dict)  # the all-FP16 evaluation on the emulator (Evaluation.to_json)
    journal: str = ""
    replayed: bool = False  # read back from the expensive backend's journal: the emulator did not run
    alternatives: dict = field(default_factory=dict)  # when S failed on the judge: how the alternatives were made
    # the default step's record on the emulator (strategy/improve.py) and its set, the judge's start set, as the
    # journal keeps them for a resumed search (empty: not run, or not yet)
    improvement: dict = field(default_factory=dict)
    oracle: View | None = field(default=None, repr=False, compare=False)  # the emulator's (None when replayed)
    # each candidate's output error alone in FP16 on the emulator (None when replayed): strategy/improve.py's rule
    measured: dict[str, float] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        return {"backend": "emulate", "status": self.status, "fp32": list(self.fp32), "order": list(self.order),
                "evaluations": self.evaluations, "seconds": round(self.seconds, 3), "minimal": self.minimal,
                "fp16": self.fp16, "journal": self.journal,
                **({"improvement": self.improvement} if self.improvement else {})}

    @classmethod
    def from_json(cls, data: dict) -> Prior:
        return cls(tuple(data["fp32"]), list(data["order"]), str(data["status"]), int(data["evaluations"]),
                   float(data["seconds"]), bool(data["minimal"]), dict(data.get("fp16") or {}),
                   str(data.get("journal", "")), replayed=True, improvement=dict(data.get("improvement") or {}))


@dataclass(frozen=True)
class PriorJournal:
    """Where the prior journals: at ``path(header)`` (its header is the judge's, with the emulator); ``restart``
    discards a journal found there, ``retry_crashed`` evaluates again the plans a process died evaluating."""

    path: Callable[[dict], str]
    restart: bool = False
    retry_crashed: bool = False


def run(graph, backend, judge: View, prof, listener, journaled: PriorJournal | None = None) -> Prior | None:
    """The search on the emulator (``backend``), as a prior for the search ``judge`` (the expensive backend's oracle,
    over the plan space searched) evaluates for: the same samples in the same order, tolerance, outputs and plan
    space; journaled as ``journaled`` says (None: not journaled). None when even all-FP32 misses the tolerance there
    (the expensive backend may still reach it: it searches alone then)."""
    start = time.perf_counter()
    samples, tolerance, outputs = judge.samples, judge.tolerance, judge.outputs
    journal = _journal(judge, backend, listener, journaled)
    oracle = replace(judge, oracle=Oracle(backend, samples, tolerance, outputs, journal=journal),
                     budget=judge.budget.uncounted() if judge.budget is not None else None)  # time, no count
    ids = list(judge.space.candidates)
    listener.stage(f"prior: measuring the output error each of {len(ids)} candidate(s) causes alone in FP16 "
                   "(emulate backend)")
    measured = ranking.effects(backend, samples, tolerance, outputs, ids,
                               ranking.counter(listener.stage, len(ids), "prior: ranking"))
    order = ranking.search_order(prof.order, prof.suspects, measured)
    listener.stage(f"prior: searching on the emulate backend first ({prof.suspects} suspect(s) first)")
    # the search ends with every single removal of its set evaluated, as the expensive backend will check it
    result = search(ids, oracle, order=order, suspects=prof.suspects,
                    hooks=Hooks(reorder=lambda: ranking.by_effect(prof.order, measured),
                                on_step=lambda step, progress: listener.step(
                                    step, {**progress, "backend": LABEL, "replayed": oracle.replayed(step.plan),
                                           "budget": oracle.left()})))
    if result.status == "fp32_fails":
        listener.stage("prior: even all-FP32 misses the tolerance on the emulator; searching on the backend alone")
        return None
    seconds = time.perf_counter() - start
    found = list(result.fp32)
    fp16 = oracle.memo.get(frozenset())  # the all-FP16 plan itself (with fixed members, another plan)
    evaluations = len(oracle.history)  # distinct plans on the emulator
    prior = Prior(tuple(found), ranking.prior_order(found, prof, measured), result.status, evaluations, seconds,
                  result.minimal, fp16.to_json() if fp16 else {}, str(journal.path) if journal else "",
                  oracle=oracle, measured=measured)
    listener.stage(f"prior: the emulator keeps {len(found)} node(s) in FP32 after {evaluations} "
                   f"evaluation(s) in {seconds:.1f} s")
    return prior


def _journal(judge: View, backend, listener, journaled: PriorJournal | None):
    """The prior's own journal at ``journaled.path(header)`` (None: not journaled), replayed when it holds
    evaluations; its header is the judge's (the same model, samples and tolerance), with the emulator and one run
    per plan."""
    if journaled is None:
        return None
    header = dict(judge.journal.header) if judge.journal is not None else {}
    header.pop("schema", None)
    header = {**header, "backend": backend.name, "repeats": 1}
    journal = Journal(journaled.path(header), header, restart=journaled.restart,
                      retry_crashed=journaled.retry_crashed)
    if journal.entries:
        listener.stage(f"prior: {len(journal.entries)} emulator evaluation(s) replayed from {journal.path}")
    return journal
