"""The prior's alternatives: the emulator's other answers when its set S fails on the judge.

When S fails there, the likeliest reason on a real runtime is a pin that has
no effect (TensorRT 10 ignoring a pin inside a Myelin fusion, a runtime with
no FP32 kernel for an op): for each member m of S, the emulator searches
again with m in FP16 (from S - {m}, over the candidates without m), and these
alternatives are evaluated on the expensive backend before any search for
additions (``search(..., hooks=Hooks(alternatives=...))``); when all fail, the ignored
pins are guessed from the failed plans, as a smallest hitting set of them
whose ties go to the candidate nearest in the graph (a breadth-first search
over tensor hops). They are computed only then, on the emulator (no engine
build), and not journaled: a resumed search recomputes them, with the same
result.
"""

from __future__ import annotations

import time
from dataclasses import replace

from fp16bisect.algorithm.search import search
from fp16bisect.evaluation.oracle import Oracle
from fp16bisect.evaluation.space import View
from fp16bisect.strategy.prior import Prior


class Alternatives:
    """``search(..., hooks=Hooks(alternatives=...))``: the emulator's other answers, asked for only when the prior's set S
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

    def __init__(self, graph, prior: Prior, judge: View, listener):
        """From the ``judge`` (the expensive backend's oracle, over the plan space searched): its samples,
        tolerance and outputs, its plan space (the fixed members in every plan, never searched) and its sample
        order. A resumed search's emulator gets the last two, as the fresh prior's had them."""
        self.graph, self.prior, self.listener = graph, prior, listener
        self.judge = judge
        self.needed: set = set()  # members the emulator cannot do without: not suspected
        self.offered: set = {frozenset(prior.fp32)}
        self.rounds = 0
        self._neighbours: dict | None = None

    def __call__(self, failed) -> list[frozenset]:
        if self.rounds >= self.ROUNDS:
            return []
        self.rounds += 1
        begin = time.perf_counter()
        oracle = self._oracle()
        before = len(oracle.history)
        found = self._one_member_each(oracle) if self.rounds == 1 else self._guess(oracle, failed)
        ranked = sorted(dict.fromkeys(found), key=len)  # sorted() is stable: ties keep S's order
        self.offered.update(ranked)
        seconds, evaluations = time.perf_counter() - begin, len(oracle.history) - before
        self._record(len(ranked), evaluations, seconds)
        self.listener.stage(f"prior: {len(ranked)} alternative set(s) of "
                            f"{', '.join(str(len(a)) for a in ranked) or '-'} node(s), from {evaluations} more "
                            f"emulator evaluation(s) in {seconds:.1f} s")
        return ranked

    def _oracle(self) -> View:
        """The prior's own: its memo (and journal) already hold each S - {m}; when the prior was read back from
        the judge's journal (resumed), a fresh emulator, with the same verdicts: the same plan space, the same
        sample order."""
        if self.prior.oracle is None:
            from fp16bisect.backends.emulate import EmulateBackend

            judge = self.judge
            self.prior.oracle = replace(judge, oracle=Oracle(EmulateBackend(self.graph), judge.samples,
                                                             judge.tolerance, judge.outputs))
        return self.prior.oracle

    def _record(self, found: int, evaluations: int, seconds: float) -> None:
        """Add a round's counts and time to ``prior.alternatives``."""
        made = self.prior.alternatives or {"members": len(self.prior.fp32), "found": 0, "evaluations": 0,
                                           "seconds": 0.0}
        made.update(found=made["found"] + found, evaluations=made["evaluations"] + evaluations,
                    seconds=round(made["seconds"] + seconds, 3), rounds=self.rounds)
        self.prior.alternatives = made

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
        """The emulator's answer with ``avoid`` in FP16, from S without them; None if it cannot pass so. The plan
        space's fixed members are in every plan and never searched, as in the prior's search."""
        ids = [c for c in oracle.space.candidates if c not in avoid]
        result = search(ids, oracle, order=[c for c in self.prior.order if c not in avoid],
                        start=[c for c in self.prior.fp32 if c not in avoid])
        return frozenset(result.fp32) if result.status == "found" else None

    def _hitting_set(self, failed: list, banned=frozenset()) -> tuple:
        """Greedy: the candidate (not one the emulator needs) in most failed plans, then in most of those it
        misses, ...; ties go to the candidate nearest to those chosen (graph hops), then the prior's order."""
        position = {c: i for i, c in enumerate(self.prior.order)}
        chosen: list  # candidate ids
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
        if not sources:
            return {}
        if self._neighbours is None:
            self._neighbours = neighbours(self.graph)
        return hops(self._neighbours, sources)


def neighbours(graph) -> dict:
    """Node id -> the ids of the nodes one tensor away (its producers and its readers)."""
    producer = {t: n.id for n in graph.nodes for t in n.outputs}
    near: dict = {n.id: set() for n in graph.nodes}
    for n in graph.nodes:
        for t in n.inputs:
            if t in producer:
                near[n.id].add(producer[t])
                near[producer[t]].add(n.id)
    return near


def hops(near: dict, sources: list) -> dict:
    """Node id -> fewest tensor hops (either way along the graph's edges) from any of ``sources``: breadth first
    over ``near`` (``neighbours``)."""
    found = {s: 0 for s in sources}
    frontier = list(sources)
    while frontier:
        after = []
        for node in frontier:
            for other in near.get(node, ()):
                if other not in found:
                    found[other] = found[node] + 1
                    after.append(other)
        frontier = after
    return found
