"""Find a smallest set of candidates that must stay in FP32.

Pure Python: the search sees candidate ids, an optional suspicion order and a predicate
``test(plan) -> True | False | None`` on plans (the frozenset of ids kept in FP32): the outputs meet
the tolerance, they do not, or the plan could not be evaluated (a build or a command failed). It
never sees ONNX or TensorRT, so it is property-tested on synthetic predicates in milliseconds.

"Could not evaluate" is never evidence: steering treats it like a failure (toward a larger set), the
answer is always a set seen to pass, and it is called 1-minimal only when every single removal of it
was evaluated and failed; a member whose removal could not be evaluated is kept and listed unverified.
No step trusts monotonicity (more FP32 never hurts) for the answer: FP16 rounding errors can cancel
and, on an engine, a pin can break a fusion. It only steers by it.

The algorithm
-------------
1. **All-FP16 on the judge.** If the empty plan passes there is nothing to keep.
2. **Grow a passing set**, by doubling. The suspects (the leading ids of ``order`` whose FP32
   activations come near the FP16 limits) in prefixes of 1, 2, 4, ..., all of them: the common
   one-site overflow passes at a prefix of 1 or 2. When none passes, ``reorder()`` (if given) ranks the
   candidates afresh (the pipeline: by the output error each causes alone in FP16) and the prefixes
   double on from twice the suspects (after all-FP32, evaluated first then: failing there, the
   tolerance is unreachable, said before any more is spent). So the set to reduce is at most twice
   the prefix that must be kept. Without a suspicion order, all candidates at once.
3. **Reduce it with QuickXplain** (Junker 2004) over the passing prefix, in order: at most
   2k*log2(n/k) + 2k evaluations for k members among n, fewer when members are clustered at the head
   of the order, and no prefix climb per member (bisection by prefixes, which a judge that is not
   monotone confuses). Its first question is the failing half-prefix, already known.
4. **One final reduction**, on the judge, trusting nothing: the set is evaluated, then each single
   removal, least suspicious first; a removal that passes is dropped at once, and the members checked
   before the last drop are checked again on the smaller set, until every removal was evaluated on
   the final set and failed (the one-site overflow: all of them already asked, k + 2 evaluations in
   all). An oracle so far from monotone that members still drop after ``CERTIFY_ROUNDS`` sweeps gets
   the smallest set seen to pass, marked not minimal.

From a given set (``start``: the emulator's answer when the judge is an engine build or a command):
after step 1, the set is evaluated; if it passes, step 4 certifies it (k + 2 evaluations in all when
the judge agrees). If it fails, the caller's ``alternatives`` (sets that pass where the start set came
from, e.g. without one member whose pin the judge may ignore) are tried, the likeliest first (the one
that leaves out most of what every failed plan holds); the first that passes goes to step 4. If none
does, the other candidates are added on top of it in doubling prefixes of ``order`` (step 2) and
QuickXplain finds which (step 3).

Several plans at once (``test_many``, ``width`` > 1): ``search_lookahead.py`` replays this algorithm on
the verdicts known so far and on hypothetical ones, and evaluates the plans it would ask next together.
The algorithm itself asks one question at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterable, Literal, Sequence

from fp16bisect.algorithm import lookahead
from fp16bisect.algorithm.budget import Stop
from fp16bisect.algorithm.memo import Memo, SearchError, Step
from fp16bisect.algorithm.progress import group_testing_bound, quickxplain_bound

__all__ = ["Hooks", "SearchError", "SearchResult", "Step", "ended", "group_testing_bound", "quickxplain_bound",
           "search"]

# What a search ends with: a set found, nothing needed (all-FP16 passes), or no set at all (all-FP32 fails).
Status = Literal["found", "fp16_passes", "fp32_fails"]

# What a caller offers when the start set fails: given the plans that failed, sets to try instead.
Alternatives = Callable[[tuple], Iterable[Iterable[Hashable]]]

# Sweeps of the final reduction that may drop members before the search stops claiming 1-minimality.
CERTIFY_ROUNDS = 4


@dataclass
class SearchResult:
    status: Status
    fp32: tuple = ()  # the set, in suspicion order
    passed: bool = False  # the returned set was seen to pass
    minimal: bool = False  # 1-minimal (see ``minimality`` for how it is known)
    minimality: str = ""  # how 1-minimality is known, or why it is not claimed
    evaluations: int = 0  # distinct plans evaluated
    rounds: int = 0  # batches of evaluations that had to wait for each other (== evaluations at width 1)
    trace: list = field(default_factory=list)  # list[Step]
    contradictions: list = field(default_factory=list)  # (passing plan, failing superset)
    agreed: bool | None = None  # with a start set: the answer is the start set (None: no start set given)
    added: tuple = ()  # with a start set: members of the answer not in it, in order
    dropped: tuple = ()  # with a start set: its members not in the answer, in order
    unverified: tuple = ()  # members kept because their removal could not be evaluated (then not minimal)
    unevaluable: int = 0  # plans that could not be evaluated
    stopped: Stop | None = None  # a budget or an interrupt ended the search before its end (``ended``)

    def __str__(self) -> str:
        if self.status == "fp32_fails":
            return f"all-FP32 plan fails the tolerance ({self.evaluations} evaluations)"
        if self.status == "fp16_passes":
            return f"all-FP16 plan passes: nothing to keep in FP32 ({self.evaluations} evaluations)"
        kind = "1-minimal" if self.minimal else "NOT minimal"
        if self.stopped is not None:
            kind = self.stopped.label
        if self.unverified:
            kind += f", {len(self.unverified)} kept unverified"
        return f"{len(self.fp32)} node(s) in FP32, {kind}, {self.evaluations} evaluations"


@dataclass(frozen=True)
class Hooks:
    """What a caller may add to the predicate; each is called only when the search needs it."""

    # no suspect prefix passes: every candidate in the order to grow in from there
    reorder: Callable[[], Sequence[Hashable]] | None = None
    # ``start`` fails: called with the plans that failed (``start`` first), and again with more while it offers
    # new sets to try
    alternatives: Alternatives | None = None
    # a judge whose verdicts vary (engine builds): the final set evaluated once more, afresh; if it fails, the
    # search says so and falls back to the smallest plan that passed
    recheck: Callable[[frozenset], bool | None] | None = None
    on_step: Callable[[Step, dict], None] | None = None  # after each evaluation: the step and the progress


@dataclass
class _Answer:
    status: Status
    fp32: frozenset = frozenset()
    unverified: tuple = ()
    why_not_minimal: str = ""  # the search gave up on 1-minimality (the smallest set seen to pass instead)


def search(
    candidates: Sequence[Hashable],
    test: Callable[[frozenset], bool | None],
    *,
    order: Sequence[Hashable] | None = None,
    suspects: int = 0,
    start: Iterable[Hashable] | None = None,
    hooks: Hooks = Hooks(),
    test_many: Callable[[list], list] | None = None,
    width: int = 1,
) -> SearchResult:
    """Search a 1-minimal FP32 set; see the module docstring.

    ``order``: the candidates, most suspicious first (default: as given); its first ``suspects`` are
    flagged. ``start``: a set to certify or continue from. ``hooks``: what the caller adds (``Hooks``).
    ``test_many(plans) -> verdicts`` with ``width`` > 1: up to ``width`` plans evaluated at once.
    """
    ids = list(dict.fromkeys(candidates))
    if len(ids) != len(candidates):
        raise SearchError("candidate ids must be unique")
    order = _permutation(ids, ids if order is None else order, "order")
    rank = {c: i for i, c in enumerate(order)}
    if start is not None:
        start = frozenset(start)
        unknown = [c for c in start if c not in rank]
        if unknown:
            raise SearchError(f"start holds {len(unknown)} id(s) that are not candidates, e.g. {unknown[0]!r}")

    reorder = hooks.reorder

    def ranked() -> list:
        assert reorder is not None  # handed on below only when there is one
        return _permutation(ids, reorder(), "reorder()")

    def algorithm(ask: lookahead.Ask) -> _Answer:
        return _answer(ask, order, max(0, min(int(suspects), len(order))), start,
                       None if hooks.reorder is None else ranked, hooks.alternatives, rank)

    memo = Memo(test, hooks.on_step, test_many, width)
    memo.everything = frozenset(ids)
    memo.progress.candidates = len(ids)
    answer = lookahead.run(algorithm, memo)
    if answer.status == "found" and not answer.why_not_minimal and hooks.recheck is not None:
        again = memo.again(answer.fp32, hooks.recheck)
        if not again:
            answer = _smallest_passing(lookahead.Ask(memo), "the set found " + (
                "could not be evaluated again" if again is None else "failed when evaluated again"))

    def in_order(plan: Iterable[Hashable]) -> tuple:
        return tuple(sorted(plan, key=rank.__getitem__))

    found = answer.fp32
    how = answer.why_not_minimal
    if answer.status == "found" and not how:
        how = (f"{len(answer.unverified)} member(s) kept, not verified: their removal could not be evaluated; "
               "every other removal evaluated and failed" if answer.unverified
               else "each removal evaluated and failed")
        if memo.contradictions:
            how += f"; the oracle contradicted monotonicity {len(memo.contradictions)} time(s)"
    elif answer.status == "fp16_passes":
        how = "empty set"
    compared = {} if start is None or answer.status == "fp32_fails" else {
        "agreed": found == start, "added": in_order(found - start), "dropped": in_order(start - found)}
    return SearchResult(
        status=answer.status, fp32=in_order(found), passed=answer.status != "fp32_fails",
        minimal=answer.status != "fp32_fails" and not answer.why_not_minimal and not answer.unverified,
        minimality=how, evaluations=len(memo.trace), rounds=memo.rounds, trace=memo.trace,
        contradictions=memo.contradictions, unverified=in_order(answer.unverified),
        unevaluable=sum(1 for v in memo.results.values() if v is None),
        **({"agreed": False} if start is not None and answer.status == "fp32_fails" else compared),
    )


def _permutation(ids: list, order: Iterable, what: str) -> list:
    order = list(order)
    if len(order) != len(ids) or sorted(map(repr, order)) != sorted(map(repr, ids)):
        raise SearchError(f"{what} must be a permutation of the candidates")
    return order


def _answer(ask: lookahead.Ask, order: list, suspects: int, start: frozenset | None,
            reorder: Callable[[], list] | None, alternatives: Alternatives | None, rank: dict) -> _Answer:
    """Steps 1 to 4 of the module docstring."""
    if ask(frozenset(), "precondition", expect=False):
        return _Answer("fp16_passes")
    distrusted: frozenset = frozenset()
    if start is None:
        found = _grow_and_explain(ask, order, suspects, reorder)
    else:
        found = start if ask(start, "start", expect=True) else None
        if found is None and alternatives is not None:
            found = _first_passing(ask, start, alternatives, rank)
            distrusted = start
        if found is None:
            found = _extend(ask, start, [c for c in order if c not in start])
    if found is None:
        return _Answer("fp32_fails")
    if not ask(found, "verify", expect=True):  # QuickXplain trusted monotonicity, and the judge is not monotone here
        found = min(ask.passing(), key=len)
    return _reduce(ask, found, rank, distrusted)


def _grow_and_explain(ask: lookahead.Ask, order: list, suspects: int,
                      reorder: Callable[[], list] | None) -> frozenset | None:
    """Steps 2 and 3: a passing prefix by doubling, reduced by QuickXplain."""
    size, fails = 1, 0
    while size < 2 * suspects:
        size = min(size, suspects)
        ask.note(searching=size)
        if ask(order[:size], "suspects"):
            return _explain(ask, frozenset(), order[:size], fails)
        fails, size = size, size * 2
    if not ask(order, "precondition", expect=True):  # all-FP32: said at once when even it misses the tolerance
        return None
    if reorder is not None:
        order, fails = ask.once("reorder", reorder), 0
    elif not suspects:  # no suspicion order: its prefixes would say nothing
        return _explain(ask, frozenset(), order, 0)
    while True:  # the prefix that passes: at most twice as long as the one that must be kept
        size = min(size, len(order))
        ask.note(searching=size)
        if ask(order[:size], "grow"):
            return _explain(ask, frozenset(), order[:size], fails)
        fails, size = size, size * 2


def _extend(ask: lookahead.Ask, start: frozenset, rest: list) -> frozenset | None:
    """From a failing start set: the rest of the order added on top of it in doubling prefixes (the last
    is all-FP32), then QuickXplain over the prefix that passes."""
    size, fails = 1, 0
    while rest:
        size = min(size, len(rest))
        ask.note(searching=size)
        if ask(start | frozenset(rest[:size]), "extend"):
            return _explain(ask, start, rest[:size], fails)
        if size == len(rest):
            break
        fails, size = size, size * 2
    return None


def _explain(ask: lookahead.Ask, base: frozenset, pool: list, fails: int) -> frozenset:
    """base | a subset of ``pool`` with which it passes (base | pool passes; base | pool[:fails] fails)."""
    ask.note(phase="reduce", searching=len(pool), decided=0, found=0, members=base)
    return base | frozenset(_quickxplain(ask, base, False, pool, fails))


def _quickxplain(ask: lookahead.Ask, background: frozenset, changed: bool, cands: list, split: int = 0) -> list:
    """Smallest subset D of ``cands`` such that background | D passes (background | cands passes),
    preferring the earlier ``cands`` (Junker 2004, QUICKXPLAIN). ``split``: where to divide ``cands`` (default:
    in halves); the caller's known failing prefix, so that the first question is already answered."""
    ask.note(settles=len(cands) if changed else 0)
    if changed and ask(background, "reduce"):
        _settled(ask, len(cands), 0)
        return []
    if len(cands) == 1:
        _settled(ask, 1, 1, cands[0])
        return list(cands)
    half = split if 0 < split < len(cands) else len(cands) // 2
    first, second = cands[:half], cands[half:]
    found_second = _quickxplain(ask, background | frozenset(first), True, second)
    found_first = _quickxplain(ask, background | frozenset(found_second), bool(found_second), first)
    return found_first + found_second


def _settled(ask: lookahead.Ask, decided: int, found: int, member: Hashable | None = None) -> None:
    progress = ask.memo.progress
    members = progress.members | {member} if found else progress.members
    ask.note(decided=progress.decided + decided, found=progress.found + found, members=members)


def _first_passing(ask: lookahead.Ask, start: frozenset, alternatives: Alternatives, rank: dict) -> frozenset | None:
    """An alternative that passes, or None. ``alternatives(failed)`` is asked with the plans that failed so
    far (``start`` first) and again, with more, each time all it offered failed, until it offers nothing
    new. A plan that fails holds a cause (a pin with no effect on the judge, say), so the members common to
    ``start`` and every failed alternative are the suspects; the next to try leaves out most of them, then
    is the smallest, then comes first in the caller's order."""
    failed, offered, suspects = [start], {start}, set(start)
    while True:
        key = ("alternatives", tuple(failed))
        options = [frozenset(a) for a in ask.once(key, lambda: list(alternatives(tuple(failed))))]
        options = [a for a in dict.fromkeys(options) if a not in offered]
        unknown = [c for a in options for c in a if c not in rank]
        if unknown:
            raise SearchError(f"an alternative holds id(s) that are not candidates, e.g. {unknown[0]!r}")
        if not options:
            return None
        offered.update(options)
        while options:
            options.sort(key=lambda a: (-len(suspects - a), len(a)))  # stable: ties keep the caller's order
            plan = options.pop(0)
            ask.note(searching=len(options) + 1)
            passed = ask(plan, "alternative")
            if passed:
                return plan
            if passed is False:  # could not be evaluated: says nothing about the cause
                failed.append(plan)
                suspects = (suspects & plan) or suspects  # none in common: more than one cause


def _reduce(ask: lookahead.Ask, current: frozenset, rank: dict, distrusted: frozenset) -> _Answer:
    """Step 4: from a passing set to one whose every single removal was evaluated on it and failed."""
    checked: dict = {}  # member -> the set its removal was evaluated on
    ask.note(phase="minimality", searching=0)
    for _ in range(CERTIFY_ROUNDS + 1):  # a sweep that drops nothing checks every member on the set: done
        for member in sorted(current, key=lambda m: (m not in distrusted, -rank[m])):
            if member not in current or checked.get(member) == current:
                continue
            ask.note(pending=[current - {m} for m in current if checked.get(m) != current])
            checked[member] = current
            if ask(current - {member}, "minimality", expect=False):
                current = current - {member}
        if all(checked.get(m) == current for m in current):
            ask.note(pending=[])
            if not current:  # every member could go: the all-FP16 plan passed
                return _Answer("fp16_passes")
            unverified = tuple(m for m in current if ask(current - {m}, "minimality") is None)
            return _Answer("found", current, unverified)
    ask.note(pending=[])
    return _smallest_passing(ask, f"after {CERTIFY_ROUNDS} sweeps that dropped members, single removals still "
                                  "pass: the judging oracle is far from monotone here")


SHOWN = 6  # members of a set a message names before it gives the count


def _smallest_passing(ask: lookahead.Ask, why: str) -> _Answer:
    """The smallest plan seen to pass (and not seen to fail since); never claimed minimal."""
    passing = ask.passing()
    if not passing:  # the only passing plan failed when evaluated again: all-FP32 is the last resort
        everything = frozenset(ask.memo.everything)
        if not ask(everything, "fallback", expect=True):
            return _Answer("fp32_fails")
        passing = [everything]
    contradictions = ask.memo.contradictions

    def shown(plan: frozenset, most: int = SHOWN) -> str:  # a set too long to read: its size and first members
        names = sorted(map(str, plan))
        return "{" + ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "") + "}"

    names = "; ".join(f"{shown(small)} passed, then failed when evaluated again" if small == big
                      else f"{shown(small)} passed but adding {shown(big - small)} to it failed"
                      for small, big in contradictions[:3])
    return _Answer("found", min(passing, key=len), why_not_minimal=f"not minimal: {why}" +
                   (f" ({names})" if names else ""))


def ended(trace: Sequence[Step], stop: Stop, order: Sequence[Hashable] = (),
          size: Callable[[frozenset], Any] = len) -> SearchResult | None:
    """What a search that ``stop`` ended early (a budget, an interrupt) answers from the evaluations it made (``trace``,
    in order; a plan evaluated again appears again): the smallest plan seen to pass (by ``size``) and never seen to
    fail (the first evaluated of the smallest), its members in ``order`` (the others after them). It claims nothing the trace
    does not show: 1-minimal only when each single removal of it was evaluated and failed, never more. None when
    no plan passed (the caller then evaluates the all-FP32 plan, beyond the budget, and asks again). The empty plan
    passing is the whole answer (nothing needs FP32), whatever stopped the search."""
    verdicts: dict = {}  # plan -> False if it ever failed, None if it could not be evaluated, else True
    passed_once: dict = {}
    for step in trace:
        old = verdicts.get(step.plan, True)
        verdicts[step.plan] = False if False in (old, step.passed) else None if None in (old, step.passed) else True
        if step.passed:
            passed_once[step.plan] = True
    passing = [plan for plan, verdict in verdicts.items() if verdict]
    if not passing:
        return None
    best = min(passing, key=size)
    minimal = all(verdicts.get(best - {member}) is False for member in best)
    failing = [plan for plan, verdict in verdicts.items() if verdict is False]
    contradictions = [(small, big) for small in passed_once for big in failing if small <= big]
    rank = {c: i for i, c in enumerate(order)}
    fp32 = tuple(sorted(best, key=lambda c: (c not in rank, rank.get(c, 0), str(c))))
    removals = sum(verdicts.get(best - {member}) is not None for member in best)
    stop = replace(stop, minimal=minimal)
    said = "empty set" if not best else (
        f"{stop.label} ({stop.said}): the smallest of {len(passing)} set(s) seen to pass; {removals} of its "
        f"{len(best)} single removal(s) evaluated" + (", each failed" if minimal else ""))
    return SearchResult(
        status="found" if best else "fp16_passes", fp32=fp32, passed=True, minimal=minimal, minimality=said,
        evaluations=len(verdicts), rounds=max((step.round for step in trace), default=0), trace=list(trace),
        contradictions=contradictions, unevaluable=sum(v is None for v in verdicts.values()),
        stopped=stop if best else None)
