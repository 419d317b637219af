"""The emulator as a free prior for an expensive backend (an engine build, a user's command per plan).

On a non-emulate backend the whole search first runs on the emulate backend
(ONNX Runtime CPU, milliseconds a plan, its own journal beside ``-o``:
``*.prior.journal.jsonl``), ending as every search does with each single
removal of its set evaluated directly (FP16 rounding is not always monotone;
on the emulator that check is free). Its
set S and its evidence (S first, then every
other candidate ranked by the output error it causes alone in FP16, see
``ranking.py``) are handed to the search on the expensive backend, which
certifies S there (k + 1 evaluations when the two agree) or continues from it
(``search(..., start=S)``). The expensive backend is always the judge.

When S fails there, the likeliest reason on a real runtime is a pin that has
no effect (TensorRT 10 ignoring a pin inside a Myelin fusion, a runtime with
no FP32 kernel for an op): for each member m of S, the emulator searches
again with m in FP16 (from S - {m}, over the candidates without m), and these
alternatives are evaluated on the expensive backend before any search for
additions (``search(..., alternatives=...)``); when all fail, the ignored
pins are guessed from the failed plans (``Alternatives``). They are computed
only then, on the emulator (no engine build), and not journaled: a resumed
search recomputes them, with the same result.

The prior's result is written into the expensive backend's journal before the
first expensive evaluation, so an interrupted search resumes from there
without the emulator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fp16bisect.strategy import ranking
from fp16bisect.errors import UsageError
from fp16bisect.evaluation.journal import Journal
from fp16bisect.evaluation.oracle import Oracle
from fp16bisect.algorithm.search import search

CHOICES = ("auto", "emulate", "none")
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
    oracle: object = field(default=None, repr=False, compare=False)  # the emulator's (None when replayed)

    def to_json(self) -> dict:
        return {"backend": "emulate", "status": self.status, "fp32": list(self.fp32), "order": list(self.order),
                "evaluations": self.evaluations, "seconds": round(self.seconds, 3), "minimal": self.minimal,
                "fp16": self.fp16, "journal": self.journal}

    @classmethod
    def from_json(cls, data: dict) -> Prior:
        return cls(tuple(data["fp32"]), list(data["order"]), str(data["status"]), int(data["evaluations"]),
                   float(data["seconds"]), bool(data["minimal"]), dict(data.get("fp16") or {}),
                   str(data.get("journal", "")), replayed=True)


def wanted(choice: str, backend_name: str) -> bool:
    """``--prior``: auto (the default) means emulate whenever the judging backend is not the emulator itself."""
    if choice not in CHOICES:
        raise UsageError(f"unknown --prior {choice!r}: use one of {', '.join(CHOICES)}")
    if choice == "none":
        return False
    if backend_name == "emulate":
        if choice == "emulate":
            raise UsageError("--prior emulate is for another backend: on --backend emulate the search already "
                             "runs on the emulator; drop --prior")
        return False
    return True


def emulator(graph, choice: str, listener):
    """The emulate backend for the prior, or None when the model does not run on ONNX Runtime CPU and the
    prior was not asked for explicitly (then the search runs without it, and says so)."""
    from fp16bisect.backends.emulate import EmulateBackend

    try:
        return EmulateBackend(graph)
    except (UsageError, RuntimeError) as exc:
        if choice == "emulate":
            raise UsageError(f"--prior emulate: {exc}") from None
        listener.stage(f"no prior: the model does not run on the emulator ({exc}); searching on the backend alone")
        return None


def run(graph, backend, samples, tolerance, outputs, prof, listener, *, header: dict, path: str | None,
        restart: bool, retry_crashed: bool = False) -> Prior | None:
    """The search on the emulator, as a prior. None when even all-FP32 misses the tolerance there (the
    expensive backend may still reach it: it searches alone then)."""
    start = time.perf_counter()
    journal = None
    if path:
        journal = Journal(path, {**header, "backend": backend.name, "repeats": 1}, restart=restart,
                          retry_crashed=retry_crashed)
        if journal.entries:
            listener.stage(f"prior: {len(journal.entries)} emulator evaluation(s) replayed from {path}")
    oracle = Oracle(backend, samples, tolerance, outputs, journal=journal)
    ids = [n.id for n in graph.candidates]
    listener.stage(f"prior: measuring the output error each of {len(ids)} candidate(s) causes alone in FP16 "
                   "(emulate backend)")
    measured = ranking.effects(backend, samples, tolerance, outputs, ids)
    order = ranking.search_order(prof.order, prof.suspects, measured)
    listener.stage(f"prior: searching on the emulate backend first ({prof.suspects} suspect(s) first)")
    # the search ends with every single removal of its set evaluated, as the expensive backend will check it
    result = search(ids, oracle, order=order, suspects=prof.suspects,
                    reorder=lambda: ranking.by_effect(prof.order, measured),
                    on_step=lambda step, progress: listener.step(
                        step, {**progress, "backend": LABEL, "replayed": step.plan in oracle.replayed}))
    if result.status == "fp32_fails":
        listener.stage("prior: even all-FP32 misses the tolerance on the emulator; searching on the backend alone")
        return None
    seconds = time.perf_counter() - start
    found = list(result.fp32)
    fp16 = oracle.memo.get(frozenset())
    evaluations = len(oracle.history)  # distinct plans on the emulator
    prior = Prior(tuple(found), ranking.prior_order(found, prof, measured), result.status, evaluations, seconds, result.minimal,
                  fp16.to_json() if fp16 else {}, path or "", oracle=oracle)
    listener.stage(f"prior: the emulator keeps {len(found)} node(s) in FP32 after {evaluations} "
                   f"evaluation(s) in {seconds:.1f} s")
    return prior


class Alternatives:
    """``search(..., alternatives=...)``: the emulator's other answers, asked for only when the prior's set S
    fails on the judge, and again (with every plan that failed there) when all those offered failed too.

    The model behind them: the judge ignores some FP32 pins (a fused layer, no FP32 kernel), so every plan that
    passes on the emulator but fails on the judge holds one of the ignored pins. First round: for each member m
    of S, the emulator's answer with m in FP16 (from S - {m}, over the candidates without m); none for a member
    the emulator cannot do without (such a member is never suspected). Later rounds: the ignored pins are
    guessed as a smallest hitting set of the failed plans (greedily: the candidate in most of them, then in
    most of those left, ..., ties going to the candidate nearest in the graph to those already guessed, as
    a runtime ignores the pins of a fused region), and the emulator answers with all of them in FP16.
    ``prior.alternatives`` records the rounds, counts and time.
    """

    ROUNDS = 3  # the one-member round, then two guesses: each costs an evaluation on the judge
    RETRIES = 3  # guesses the emulator cannot pass with (or answers as before) in a round, before giving up

    def __init__(self, graph, prior: Prior, samples, tolerance, outputs, listener):
        self.graph, self.prior, self.listener = graph, prior, listener
        self.samples, self.tolerance, self.outputs = samples, tolerance, outputs
        self.needed: set = set()  # members the emulator cannot do without: not suspected
        self.offered: set = {frozenset(prior.fp32)}
        self.rounds = 0
        self._neighbours: dict | None = None

    def __call__(self, failed) -> list[frozenset]:
        if self.rounds >= self.ROUNDS:
            return []
        self.rounds += 1
        begin = time.perf_counter()
        oracle = self.prior.oracle  # the prior's own: its memo (and journal) already hold each S - {m}
        if oracle is None:  # resumed from the judge's journal: a fresh emulator, with the same verdicts
            from fp16bisect.backends.emulate import EmulateBackend

            oracle = self.prior.oracle = Oracle(EmulateBackend(self.graph), self.samples, self.tolerance,
                                                self.outputs)
        before = len(oracle.history)
        found = self._one_member_each(oracle) if self.rounds == 1 else self._guess(oracle, failed)
        ranked = sorted(dict.fromkeys(found), key=len)  # sorted() is stable: ties keep S's order
        self.offered.update(ranked)
        seconds, evaluations = time.perf_counter() - begin, len(oracle.history) - before
        made = self.prior.alternatives or {"members": len(self.prior.fp32), "found": 0, "evaluations": 0,
                                           "seconds": 0.0}
        made.update(found=made["found"] + len(ranked), evaluations=made["evaluations"] + evaluations,
                    seconds=round(made["seconds"] + seconds, 3), rounds=self.rounds)
        self.prior.alternatives = made
        self.listener.stage(f"prior: {len(ranked)} alternative set(s) of "
                            f"{', '.join(str(len(a)) for a in ranked) or '-'} node(s), from {evaluations} more "
                            f"emulator evaluation(s) in {seconds:.1f} s")
        return ranked

    def _one_member_each(self, oracle) -> list[frozenset]:
        members = list(self.prior.fp32)
        self.listener.stage(f"prior: the emulator's set fails here; searching on the emulate backend for an "
                            f"alternative to each of its {len(members)} member(s), as if that member's FP32 pin "
                            "had no effect")
        found = []
        for i, member in enumerate(members, 1):
            answer = self._answer(oracle, frozenset({member}))
            if answer is None:
                self.needed.add(member)
            else:
                found.append(answer)
            self.listener.stage(f"prior: alternative {i} of {len(members)}, {member} in FP16: "
                                + (f"{len(answer)} node(s)" if answer is not None else "none (the emulator needs it)"))
        return found

    def _guess(self, oracle, failed) -> list[frozenset]:
        banned: set = set()
        while len(banned) < self.RETRIES:
            guess = self._hitting_set([frozenset(f) for f in failed], banned)
            if not guess:
                return []
            answer = self._answer(oracle, frozenset(guess))
            self.listener.stage(f"prior: {len(failed)} plan(s) failed here that pass on the emulator; guessing the "
                                f"pins with no effect as {', '.join(map(str, guess))}: "
                                + (f"{len(answer)} node(s)" if answer is not None else "the emulator cannot pass so"))
            if answer is not None and answer not in self.offered:
                return [answer]
            banned.add(guess[0])  # the first guessed is in most failed plans: so is a pin the emulator needs
        return []

    def _answer(self, oracle, avoid: frozenset) -> frozenset | None:
        """The emulator's answer with ``avoid`` in FP16, from S without them; None if it cannot pass so."""
        ids = [n.id for n in self.graph.candidates if n.id not in avoid]
        result = search(ids, oracle, order=[c for c in self.prior.order if c not in avoid],
                        start=[c for c in self.prior.fp32 if c not in avoid])
        return frozenset(result.fp32) if result.status == "found" else None

    def _hitting_set(self, failed: list, banned=frozenset()) -> tuple:
        """Greedy: the candidate (not one the emulator needs) in most failed plans, then in most of those it
        misses, ...; ties go to the candidate nearest to those chosen (graph hops), then the prior's order."""
        position = {c: i for i, c in enumerate(self.prior.order)}
        left, chosen = list(failed), []
        while left:
            counts: dict = {}
            for plan in left:
                for c in plan:
                    if c not in self.needed and c not in banned:
                        counts[c] = counts.get(c, 0) + 1
            if not counts:
                break
            near = self._hops(chosen)
            best = min(counts, key=lambda c: (-counts[c], near.get(c, len(position)), position.get(c, len(position))))
            chosen.append(best)
            left = [plan for plan in left if best not in plan]
        return tuple(chosen)

    def _hops(self, sources: list) -> dict:
        """Node id -> fewest tensor hops (either way along the graph's edges) from any of ``sources``."""
        if not sources:
            return {}
        if self._neighbours is None:
            producer = {t: n.id for n in self.graph.nodes for t in n.outputs}
            self._neighbours = {n.id: set() for n in self.graph.nodes}
            for n in self.graph.nodes:
                for t in n.inputs:
                    if t in producer:
                        self._neighbours[n.id].add(producer[t])
                        self._neighbours[producer[t]].add(n.id)
        hops = {s: 0 for s in sources}
        frontier = list(sources)
        while frontier:
            after = []
            for node in frontier:
                for other in self._neighbours.get(node, ()):
                    if other not in hops:
                        hops[other] = hops[node] + 1
                        after.append(other)
            frontier = after
        return hops


def agreement(result, backend: str) -> str:
    """One line: how the judging backend's answer relates to the emulator's set."""
    if result.agreed:
        return f"{backend} agrees with the emulator: {result.evaluations} evaluation(s) on {backend}"
    if result.status == "fp32_fails":
        return f"{backend} disagrees with the emulator: even all-FP32 misses the tolerance there"
    said = [f"added {len(result.added)}: {_names(result.added)}" if result.added else "",
            f"dropped {len(result.dropped)}: {_names(result.dropped)}" if result.dropped else ""]
    return (f"{backend} disagrees with the emulator: {'; '.join(s for s in said if s) or 'another set'} "
            f"({result.evaluations} evaluation(s) on {backend})")


def _names(ids, limit: int = 5) -> str:
    ids = list(map(str, ids))
    return ", ".join(ids[:limit]) + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")
