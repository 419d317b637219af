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
alternatives, fewest members first, are evaluated on the expensive backend
before any search for additions (``search(..., alternatives=...)``). They are
computed only then, on the emulator (no engine build), and not journaled:
a resumed search recomputes them, with the same result.

The prior's result is written into the expensive backend's journal before the
first expensive evaluation, so an interrupted search resumes from there
without the emulator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from . import ranking
from .errors import UsageError
from .journal import Journal
from .oracle import Oracle
from .search import search

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


def journal_path(output: str) -> str:
    """Beside the override JSON: overrides.json -> overrides.prior.journal.jsonl."""
    return str(Path(output).with_suffix(".prior.journal.jsonl"))


def emulator(graph, choice: str, listener):
    """The emulate backend for the prior, or None when the model does not run on ONNX Runtime CPU and the
    prior was not asked for explicitly (then the search runs without it, and says so)."""
    from .backends.emulate import EmulateBackend

    try:
        return EmulateBackend(graph)
    except (UsageError, RuntimeError) as exc:
        if choice == "emulate":
            raise UsageError(f"--prior emulate: {exc}") from None
        listener.stage(f"no prior: the model does not run on the emulator ({exc}); searching on the backend alone")
        return None


def run(graph, backend, samples, tolerance, outputs, prof, listener, *, header: dict, path: str | None,
        restart: bool) -> Prior | None:
    """The search on the emulator, as a prior. None when even all-FP32 misses the tolerance there (the
    expensive backend may still reach it: it searches alone then)."""
    start = time.perf_counter()
    journal = None
    if path:
        journal = Journal(path, {**header, "backend": backend.name, "repeats": 1}, restart=restart)
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
                    on_step=lambda step, progress: listener.step(
                        step, {**progress, "backend": LABEL, "replayed": step.plan in oracle.replayed}))
    if result.status == "fp32_fails":
        listener.stage("prior: even all-FP32 misses the tolerance on the emulator; searching on the backend alone")
        return None
    seconds = time.perf_counter() - start
    found = list(result.fp32)
    rest = ranking.by_effect([c for c in prof.order if c not in set(found)], measured)
    fp16 = oracle.memo.get(frozenset())
    evaluations = len(oracle.history)  # distinct plans on the emulator
    prior = Prior(tuple(found), found + rest, result.status, evaluations, seconds, result.minimal,
                  fp16.to_json() if fp16 else {}, path or "", oracle=oracle)
    listener.stage(f"prior: the emulator keeps {len(found)} node(s) in FP32 after {evaluations} "
                   f"evaluation(s) in {seconds:.1f} s")
    return prior


def alternatives(graph, prior: Prior, samples, tolerance, outputs, listener) -> list[frozenset]:
    """For each member m of the prior's set S: the emulator's answer with m in FP16 (its pin has no effect on
    the judge), searched from S - {m} over the candidates without m; none for a member the emulator cannot do
    without. Fewest members first, ties in S's order. Records counts and time in ``prior.alternatives``."""
    begin = time.perf_counter()
    oracle = prior.oracle  # the prior's own: its memo (and journal) already hold each S - {m}
    if oracle is None:  # resumed from the judge's journal: a fresh emulator, with the same verdicts
        from .backends.emulate import EmulateBackend

        oracle = Oracle(EmulateBackend(graph), samples, tolerance, outputs)
    before = len(oracle.history)
    ids = [n.id for n in graph.candidates]
    members = list(prior.fp32)
    listener.stage(f"prior: the emulator's set fails here; searching on the emulate backend for an alternative to "
                   f"each of its {len(members)} member(s), as if that member's FP32 pin had no effect")
    found = []
    for member in members:
        rest = [c for c in ids if c != member]
        result = search(rest, oracle, order=[c for c in prior.order if c != member],
                        start=[c for c in members if c != member])
        if result.status == "found":
            found.append(frozenset(result.fp32))
    ranked = sorted(dict.fromkeys(found), key=len)  # sorted() is stable: ties keep S's order
    seconds = time.perf_counter() - begin
    evaluations = len(oracle.history) - before
    prior.alternatives = {"members": len(members), "found": len(ranked), "evaluations": evaluations,
                          "seconds": round(seconds, 3)}
    listener.stage(f"prior: {len(ranked)} alternative set(s) of {', '.join(str(len(a)) for a in ranked) or '-'} "
                   f"node(s), from {evaluations} more emulator evaluation(s) in {seconds:.1f} s")
    return ranked
