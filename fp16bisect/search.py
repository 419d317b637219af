"""Find a smallest set of candidates that must stay in FP32.

Pure Python: the search sees candidate ids, an optional suspicion order and a
test predicate ``test(plan) -> bool | None`` (``plan`` is the frozenset of ids kept
in FP32; True means the outputs meet the tolerance, False that they do not, None
that the plan could not be evaluated: a build or a command failed).

Three verdicts. "Could not evaluate" is never evidence: steering treats it as
the safe side (like a failure, toward a larger set), the answer is always a set
seen to pass, and it is called 1-minimal only when every single removal was
evaluated and failed. A member whose removal could not be evaluated is kept and
listed in ``SearchResult.unverified``; the result then says it is not minimal.

Nothing here knows about ONNX or TensorRT, so the algorithm can be
property-tested on synthetic predicates in milliseconds.

Algorithm
---------
1. Preconditions: the all-FP16 (empty) plan must fail, and the all-FP32 plan
   must pass. All-FP32 is evaluated only when no suspect prefix passes: a
   passing plan implies it under monotonicity (and on a GPU it is one engine
   build saved).
2. Suspicion first (only when the caller flags ``suspects``, the leading ids of
   ``order`` whose FP32 activations come near the FP16 limits): test growing
   prefixes of the order, of sizes 1, 2, 4, ..., up to all suspects. A passing
   prefix bounds the search to that prefix; the common one-site overflow then
   costs a handful of evaluations. A passing prefix of at most ``SMALL_POOL``
   suspects is reduced by dropping its members one by one.
3. Otherwise bisection over the pool (the passing prefix, or all candidates
   in suspicion order; there the caller may reorder the candidates after the
   suspects, ``rest_order``, e.g. by measured effect when the failure is
   accumulated rounding): each member found costs one binary search for the
   shortest passing prefix, about log2(n) + 1 tests, near the group-testing
   bound log2 C(n, k) when members are few. When they turn out dense, the
   rest goes to QuickXplain (Junker 2004), whose worst case is
   2k*log2(n/k) + 2k tests for k members among n.
4. Verification, on the oracle that judges, trusting no monotonicity: the
   final set is evaluated, then every single removal (``set - {member}``).
   One at a time (``_sweep``), a member whose removal passes is dropped at
   once and only the members checked before the last drop are evaluated again
   on the smaller set. With ``test_many`` all removals are one batch; members
   whose removal passes are dropped (all together first, one by one if that
   fails) and the removals of the smaller set are evaluated again. Either way
   it ends at a passing set none of whose single removals passes
   (``_reduce``). Real oracles are not monotone (FP16 rounding errors can cancel; pinning a node can break a
   fusion on an engine), so a failing superset is no proof: measured on real
   models at a tolerance of half their all-FP16 error, 1 to 11 removals of a
   set "proved" minimal that way still passed. This costs at most k
   evaluations for k members, nothing where the removals were already asked
   (dropping suspects one by one asks exactly them).

When the oracle contradicts monotonicity (a plan fails while a subset of it
passed), the search says so; the answer is still 1-minimal by direct
evaluation. Where the reduction keeps finding members to drop (an oracle far
from monotone), it stops after ``CERTIFY_ROUNDS`` rounds and returns the
smallest set seen to pass, marked not minimal.

Starting from a given set (``start``: another oracle's answer, e.g. the
emulator's when the oracle here is an engine build)
--------------------------------------------------------------------------
Certify or continue, instead of steps 1-3:

* The start set S is evaluated. If it passes, each member m is certified by
  evaluating S - {m} (independent plans: one batch with ``test_many``). When
  every removal fails, S is the answer after k + 1 evaluations for k members:
  no all-FP16 or all-FP32 plan is needed (a passing S implies all-FP32 passes
  and a failing S - {m} that all-FP16 fails, under monotonicity).
* If S fails and the caller gave ``alternatives`` (other sets that pass where
  S came from, e.g. the emulator's answer when one member's FP32 pin has no
  effect on the judge), they are evaluated one by one (``width`` at a time),
  and the first that passes goes on to the reduction. The next to try is the
  one that leaves out most of the members common to S and every alternative
  that failed (a failing plan holds the cause), then the smallest. When all
  fail, the caller is asked again with every plan that failed, and may offer
  more (the prior guesses the ignored pins from them).
  A runtime that ignores a pin (TensorRT 10 inside a Myelin fusion, a
  runtime with no FP32 kernel for an op) then costs a few evaluations more
  than agreement, where bisecting for what to add costs about log2(n) + 1
  evaluations an addition.
* Otherwise (no alternative passes) the answer needs a candidate outside S
  (monotonicity). The rest
  of ``order`` is added on top of S in prefixes of 1, 2, 4, ... until one
  passes (the last is all-FP32: failing means ``fp32_fails``), then bisection
  with S as the base finds the additions (step 3).
* Either way the set then goes through the reduction of step 4. In agreement
  this costs nothing extra: the k removals are the certificate.
* ``SearchResult.added`` and ``.dropped`` say how the answer differs from S;
  ``.agreed`` is True when it is S. With ``recheck`` (an oracle whose verdicts
  vary) the final set is evaluated once more, as in step 4.

Parallel rounds (``test_many`` and ``width`` > 1): where the next questions are
independent they go out together. The minimality checks are one batch. The
sequential steps (growing suspect prefixes, each member's binary search,
galloping, dropping one by one) look ahead: before asking a plan not yet known,
``_speculate`` asks, in the same round, the plans the next steps would ask
under either answer (breadth first, up to ``width``), so that a binary search
tests several split points at once (a k-ary split) and the steps that follow
find their answers known. QuickXplain's recursion is not speculated: at width > 1
dense members without a suspicion order stay with bisection, whose k-ary rounds
are fewer (more evaluations, fewer rounds). At width 1 nothing changes: the same
plans in the same order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Sequence

Plan = frozenset


class SearchError(Exception):
    """The predicate raised or the arguments are inconsistent."""


@dataclass(frozen=True)
class Step:
    """One evaluation made by the search."""

    index: int  # 1-based count of distinct evaluations so far
    plan: frozenset
    passed: bool | None  # None: could not be evaluated
    phase: str  # precondition | suspects | split | verify | minimality; from a start set: start | alternative |
    # extend | certify
    round: int = 0  # evaluations of one round ran together (``test_many``); a round waits for the one before


@dataclass
class SearchResult:
    status: str  # found | fp16_passes | fp32_fails
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

    def __str__(self) -> str:
        if self.status == "fp32_fails":
            return f"all-FP32 plan fails the tolerance ({self.evaluations} evaluations)"
        if self.status == "fp16_passes":
            return f"all-FP16 plan passes: nothing to keep in FP32 ({self.evaluations} evaluations)"
        kind = "1-minimal" if self.minimal else "NOT minimal"
        if self.unverified:
            kind += f", {len(self.unverified)} kept unverified"
        return f"{len(self.fp32)} node(s) in FP32, {kind}, {self.evaluations} evaluations"


def group_testing_bound(n: int, k: int) -> float:
    """log2 C(n, k): information-theoretic lower bound on adaptive tests."""
    if k <= 0 or k >= n:
        return 0.0
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def estimate_left(pool: int, remaining: int, found: int) -> float:
    """Evaluations still to come, roughly: the members left are guessed from the density found so far in
    the part of the pool already searched, each costing a binary search (log2 + 1), plus the verification
    (the set, then each member's removal)."""
    consumed = pool - remaining
    k = max(1.0, found / consumed * remaining) if found and consumed > 0 else 1.0
    k = min(k, float(remaining))
    return k * (math.log2(max(remaining / k, 1.0)) + 1) + 1 + found + k


def _dense_left(dense: tuple, decided: int, found: int) -> float:
    """Galloping's evaluations still to come, roughly: between one test a member and QuickXplain's bound on
    what is undecided, with the members there guessed from the density among the candidates decided so
    far (at its start: the density before)."""
    found_before, k_start, size = dense
    got, left = found - found_before, size - decided
    if left <= 0:
        return 1.0 + found
    k = max(1.0, min(got / decided * left if decided and got else k_start * left / size, left))
    binary = k * (math.log2(max(left / k, 1.0)) + 1)
    return (binary + quickxplain_bound(left, k)) / 2 + 1 + found + k  # measured: between the two; then removals


def quickxplain_bound(n: int, k: int) -> float:
    """2k*log2(n/k) + 2k: QuickXplain's worst case for k elements among n."""
    if k <= 0:
        return 0.0
    return 2 * k * math.log2(max(n / k, 1.0)) + 2 * k


class _Memo:
    """Evaluates each distinct plan once and records the trace."""

    def __init__(self, test, on_step, n_total, test_many=None, width: int = 1):
        self._test = test
        self._test_many = test_many
        self.width = max(1, int(width))  # plans that may be evaluated at once
        self.rounds = 0
        self._on_step = on_step
        self.results: dict[frozenset, bool | None] = {}
        self.trace: list[Step] = []
        self.contradictions: list[tuple[frozenset, frozenset]] = []
        self.phase = "precondition"
        self.remaining = n_total  # size of the set still being searched (for progress)
        self.pool = n_total  # size of the set the split phase started from
        self.found = 0
        self.everything: frozenset = frozenset()
        self.dense: tuple[int, float, int] | None = None  # QuickXplain's start: found, members guessed, size
        self.decided = 0  # candidates QuickXplain has settled, in or out
        self.pending: list = []  # the removals the final verification is evaluating (step 4)

    def __call__(self, plan: Iterable[Hashable]) -> bool:
        plan = frozenset(plan)
        if plan in self.results:
            return self.results[plan]
        self.rounds += 1
        return self._record(plan, _verdict(self._test(plan)))

    def many(self, plans: Iterable[Iterable[Hashable]]) -> list[bool | None]:
        """Verdicts of several independent plans. With ``test_many`` and a width above 1 the plans not yet
        known are evaluated together, ``width`` at a time (one round each); otherwise one by one."""
        plans = [frozenset(p) for p in plans]
        todo = list(dict.fromkeys(p for p in plans if p not in self.results))
        if self._test_many is None or self.width == 1:
            for plan in todo:
                self(plan)
        else:
            for i in range(0, len(todo), self.width):
                chunk = todo[i : i + self.width]
                self.rounds += 1
                verdicts = list(self._test_many(chunk))
                if len(verdicts) != len(chunk):
                    raise SearchError(f"test_many returned {len(verdicts)} verdicts for {len(chunk)} plans")
                for plan, passed in zip(chunk, verdicts):
                    self._record(plan, _verdict(passed))
        return [self.results[p] for p in plans]

    def _record(self, plan: frozenset, passed: bool | None) -> bool | None:
        self.results[plan] = passed
        if passed is not None:
            self._note_contradictions(plan, passed)
        step = Step(len(self.trace) + 1, plan, passed, self.phase, self.rounds)
        self.trace.append(step)
        if self._on_step is not None:
            self._on_step(step, self.progress())
        return passed

    def progress(self) -> dict:
        if self.pending:  # the final removals (step 4): exactly those not yet evaluated
            left = sum(1 for plan in self.pending if plan not in self.results)
        elif self.dense is not None and self.remaining:
            left = _dense_left(self.dense, self.decided, self.found)
        else:
            left = estimate_left(self.pool, self.remaining, self.found) if self.remaining else 0
        return {
            "evaluations": len(self.trace),
            "phase": self.phase,
            "searching": self.remaining,
            "found": self.found,
            "estimate_left": int(math.ceil(left)),
        }

    def again(self, plan: frozenset, recheck) -> bool | None:
        """A fresh evaluation of a plan already judged; a different verdict is a contradiction."""
        passed = _verdict(recheck(plan))
        self.rounds += 1
        step = Step(len(self.trace) + 1, plan, passed, "recheck", self.rounds)
        self.trace.append(step)
        if self._on_step is not None:
            self._on_step(step, self.progress())
        if passed is None:
            return None
        if passed != self.results.get(plan, passed):
            self.contradictions.append((plan, plan))
            self.results[plan] = self.results[plan] and passed  # a plan that failed once is not trusted
        return passed

    def _note_contradictions(self, plan: frozenset, passed: bool) -> None:
        for other, other_passed in self.results.items():
            if other_passed is None:
                continue
            if passed and not other_passed and plan < other:
                self.contradictions.append((plan, other))
            elif not passed and other_passed and other < plan:
                self.contradictions.append((other, plan))



def _verdict(value) -> bool | None:
    return None if value is None else bool(value)


def _speculate(memo: _Memo, state, trial, advance) -> None:
    """At width > 1, when the next plan (``trial(state)``) is not known: evaluate it together with the plans
    the steps after it would ask, under either answer, breadth first, up to ``width`` plans in one round.

    ``trial(state)``: the plan a step asks (None when the steps are done); ``advance(state, passed)``: the
    state after its answer. Known answers are followed, not branched on: the round only holds plans some
    outcome can ask, and the first is the one asked next.
    """
    if memo.width <= 1:
        return
    first = trial(state)
    if first is None or first in memo.results:
        return
    asked: list = []
    frontier = [state]
    while frontier and len(asked) < memo.width:
        after = []
        for s in frontier:
            plan = trial(s)
            if plan is None:
                continue
            if plan in memo.results:
                after.append(advance(s, memo.results[plan]))
                continue
            if plan not in asked:
                if len(asked) == memo.width:
                    break
                asked.append(plan)
            after += [advance(s, True), advance(s, False)]
        frontier = after
    memo.many(asked)


def _quickxplain(memo: _Memo, background: frozenset, changed: bool, cands: list) -> list:
    """Smallest subset D of ``cands`` such that background | D passes.

    Precondition: background | cands passes. Junker's QuickXplain with the
    usual split in halves; the first half is preferred.
    """
    if changed and memo(background):
        memo.decided += len(cands)
        return []
    if len(cands) == 1:
        memo.found += 1
        memo.decided += 1
        return list(cands)
    half = len(cands) // 2
    first, second = cands[:half], cands[half:]
    memo.remaining = len(cands)
    found_second = _quickxplain(memo, background | frozenset(first), bool(first), second)
    found_first = _quickxplain(memo, background | frozenset(found_second), bool(found_second), first)
    return found_first + found_second


def _gallop(memo: _Memo, cands: list, base: frozenset) -> list:
    """Smallest subset D of ``cands`` such that base | D passes, from the least suspicious end.

    Precondition: base | cands passes. Drops chunks off the end while what is left still passes,
    doubling the chunk after a success and halving it after a failure; a chunk of one that cannot go
    is a member. Dense members cost one test each (QuickXplain spends about two); a gap of g
    non-members costs about 2*log2(g), so sparse members stay within QuickXplain's bound.
    Each member's failing test contains every other member: 1-minimality comes with it.
    """
    def trial(state):
        end, chunk, members = state
        if end == 0:
            return None
        return base | frozenset(cands[: end - min(chunk, end)]) | frozenset(members)

    def advance(state, passed: bool):
        end, chunk, members = state
        size = min(chunk, end)
        if passed:
            return end - size, chunk * 2, members
        if size == 1:
            return end - 1, 1, members + (cands[end - 1],)
        return end, max(1, size // 2), members

    state = (len(cands), 1, ())
    while state[0] > 0:
        plan = trial(state)
        if plan:  # the empty plan is all-FP16, known to fail
            _speculate(memo, state, trial, advance)
        after = advance(state, bool(plan) and memo(plan))
        memo.decided += state[0] - after[0]
        memo.found += len(after[2]) - len(state[2])
        memo.remaining = after[0]
        state = after
    return list(state[2])[::-1]


# A passing prefix of suspects this small is mostly culprits (an overflow site
# flags its producer and its readers): trying to drop each one is cheapest.
SMALL_POOL = 6


def _drop_one_by_one(memo: _Memo, pool: list) -> list:
    """Drop members from the least suspicious end while the rest still passes."""
    def trial(state):
        at, keep = state
        return None if at < 0 else frozenset(x for x in keep if x != pool[at])

    def advance(state, passed: bool):
        at, keep = state
        return at - 1, tuple(x for x in keep if x != pool[at]) if passed and len(keep) > 1 else keep

    state = (len(pool) - 1, tuple(pool))
    while state[0] >= 0:
        plan = trial(state)
        if plan:
            _speculate(memo, state, trial, advance)
        after = advance(state, bool(plan) and memo(plan))
        if after[1] == state[1]:
            memo.found += 1
        memo.remaining -= 1
        state = after
    return list(state[1])


def _bisect(memo: _Memo, pool: list, suspected: bool = False, base: frozenset = frozenset(),
            fails: int = 0) -> list:
    """Smallest subset of ``pool`` that passes (with ``base``, kept throughout), one member at a time.

    Precondition: ``base | pool`` passes and ``base`` alone fails; ``base | pool[:fails]`` is known to fail
    (a bound for the first round). Each round binary
    searches the shortest passing prefix of what is left (with the members
    found so far); its last element is a member. About log2(n) + 1 tests a
    member, close to the group-testing bound when members are few. When
    members turn out dense (see ``_dense``), QuickXplain takes over for the
    rest, which is cheaper there.
    """
    found: list = []
    rest = list(pool)

    # A member's search: (fails, passes) prefix lengths of rest, base | rest[:fails] fails and base | rest[:passes]
    # passes; fails == -1 first asks whether the members found so far suffice (base alone; passing ends it).
    def trial(state):
        fails, passes = state
        if fails < 0:
            return base
        return base | frozenset(rest[: (fails + passes) // 2]) if passes - fails > 1 else None

    def advance(state, passed: bool):
        fails, passes = state
        if fails < 0:
            return (0, 0) if passed else (0, passes)
        mid = (fails + passes) // 2
        return (fails, mid) if passed else (mid, passes)

    while rest:
        dense = bool(found) and _dense(len(found), len(pool) - len(rest), len(rest))
        if dense and memo.width > 1 and not suspected:  # rounds, not evaluations: k-ary splits beat QuickXplain
            dense = False
        if found and not dense:  # the base question and the first split points in one round
            _speculate(memo, (-1, len(rest)), trial, advance)
        if found and memo(base):
            break
        if dense:
            density = len(found) / max(len(pool) - len(rest), 1)
            memo.dense = (len(found), max(1.0, density * len(rest)), len(rest))
            if suspected:  # members cluster in a suspect prefix: one test a member, QuickXplain spends two
                return found + _gallop(memo, rest, base)
            return found + _quickxplain(memo, base, True, rest)
        memo.remaining = len(rest)
        fails, passes = (0 if found else fails), len(rest)  # base | rest[:fails] fails, base | rest[:passes] passes
        while passes - fails > 1:
            _speculate(memo, (fails, passes), trial, advance)  # width > 1: several split points at once
            mid = (fails + passes) // 2
            if memo(base | frozenset(rest[:mid])):
                passes = mid
            else:
                fails = mid
        member = rest[passes - 1]
        found.append(member)
        memo.found = len(found)
        base = base | {member}
        rest = rest[: passes - 1]
    return found


def _dense(found: int, consumed: int, left: int) -> bool:
    """True when QuickXplain (or galloping) should be cheaper than bisection for the rest.

    Bisection costs about log2(left) + 1 tests a member; QuickXplain about
    2*log2(gap) + 2, where gap (candidates consumed a member found so far)
    estimates the spacing of the members still to find.
    """
    gap = max(consumed / found, 1.0)
    return math.log2(left) + 1 > 2 * math.log2(gap) + 2


def search(
    candidates: Sequence[Hashable],
    test: Callable[[frozenset], bool],
    *,
    order: Sequence[Hashable] | None = None,
    suspects: int = 0,
    on_step: Callable[[Step, dict], None] | None = None,
    recheck: Callable[[frozenset], bool] | None = None,
    test_many: Callable[[list], list] | None = None,
    width: int = 1,
    start: Iterable[Hashable] | None = None,
    rest_order: Callable[[], Sequence[Hashable]] | None = None,
    alternatives: Callable[[tuple], Iterable[Iterable[Hashable]]] | None = None,
) -> SearchResult:
    """Search a 1-minimal FP32 set; see the module docstring.

    ``start``: a set to certify or continue from (another oracle's answer; see "Starting from a given set").
    ``order`` then ranks the candidates outside it (``suspects`` is not used). ``alternatives(failed)``: called
    only when ``start`` fails, with the plans that failed (``start`` first); other sets to try before searching
    for additions, most plausible first; called again with more failures while it offers new ones.

    ``rest_order()``: called only when no suspect prefix passes (and all-FP32 does); returns the candidates
    after the suspects in the order to search them (e.g. by measured effect, which costs the caller work
    that a passing suspect prefix makes unnecessary).

    ``test_many(plans) -> verdicts`` with ``width`` > 1: independent plans (the minimality checks, for one)
    are evaluated up to ``width`` at once; ``SearchResult.rounds`` counts the batches that waited on each other.

    ``recheck``: for an oracle whose verdicts can vary (engine builds), evaluates the final set once more,
    afresh; if it fails, the search says so and falls back to the smallest plan that passed.
    """
    ids = list(dict.fromkeys(candidates))
    if len(ids) != len(candidates):
        raise SearchError("candidate ids must be unique")
    if order is None:
        order = ids
    order = list(order)
    if sorted(map(repr, order)) != sorted(map(repr, ids)) or len(order) != len(ids):
        raise SearchError("order must be a permutation of the candidates")
    suspects = max(0, min(int(suspects), len(order)))

    memo = _Memo(test, on_step, len(ids), test_many, width)
    everything = frozenset(ids)
    memo.everything = everything
    rank = {c: i for i, c in enumerate(order)}

    def result(status, fp32=(), **kw) -> SearchResult:
        return SearchResult(
            status=status,
            fp32=tuple(sorted(fp32, key=rank.__getitem__)),
            evaluations=len(memo.trace),
            rounds=memo.rounds,
            trace=memo.trace,
            contradictions=memo.contradictions,
            unevaluable=sum(1 for v in memo.results.values() if v is None),
            **kw,
        )

    if start is not None:
        start = frozenset(start)
        unknown = [c for c in start if c not in rank]
        if unknown:
            raise SearchError(f"start holds {len(unknown)} id(s) that are not candidates, e.g. {unknown[0]!r}")
        return _from_start(memo, result, start, order, recheck, alternatives)

    def opening(state):  # the plans asked first: all-FP16 (0), suspect prefixes (1, 2, 4, ...), all-FP32
        if state == 0:
            return frozenset()
        if state == "all":
            return everything
        return None if state is None else frozenset(order[: min(state, suspects)])

    def opened(state, passed: bool):
        if passed or state == "all":
            return None
        if state == 0:
            return 1 if suspects else "all"
        return state * 2 if state < suspects else "all"

    # Preconditions. All-FP16 first; all-FP32 only when no suspect prefix passes: a passing plan implies
    # it by monotonicity, and on a GPU it is one engine build saved. (Width > 1: asked together, ahead.)
    _speculate(memo, 0, opening, opened)
    if memo(frozenset()):
        return result("fp16_passes", passed=True, minimal=True, minimality="empty set")

    # Suspicion first: growing prefixes of the flagged part of the order.
    pool = order
    if suspects:
        memo.phase = "suspects"
        size = 1
        while True:
            _speculate(memo, size, opening, opened)
            size = min(size, suspects)
            memo.remaining = size
            if memo(frozenset(order[:size])):
                pool = order[:size]
                break
            if size == suspects:
                break
            size *= 2

    if pool is order:
        memo.phase = "precondition"
        if not memo(everything):
            return result("fp32_fails")
        if rest_order is not None:  # no suspect prefix explains the failure: the caller's ranking of the rest
            later = list(rest_order())
            if sorted(map(repr, later)) != sorted(map(repr, order[suspects:])) or len(later) != len(ids) - suspects:
                raise SearchError("rest_order must return a permutation of the candidates after the suspects")
            order[suspects:] = later
            rank.clear()
            rank.update((c, i) for i, c in enumerate(order))

    memo.phase = "split"
    memo.remaining = memo.pool = len(pool)
    if pool is not order and len(pool) <= SMALL_POOL:
        found = frozenset(_drop_one_by_one(memo, list(pool)))
    else:
        found = frozenset(_bisect(memo, list(pool), suspected=pool is not order))

    memo.phase = "verify"
    memo.remaining = 0
    if not memo(found):
        return _fallback(memo, result, "the set found fails when evaluated")
    return _reduce(memo, result, found, rank, recheck, "minimality")


# Rounds of "evaluate every removal, drop the members whose removal passes" before the search gives up on
# 1-minimality (each costs k evaluations; a monotone judge needs one round more than its disagreements' depth).
CERTIFY_ROUNDS = 4


def _from_start(memo: _Memo, result, start: frozenset, order: list, recheck, alternatives=None) -> SearchResult:
    """Certify ``start`` or continue from it (module docstring, "Starting from a given set")."""
    rank = {c: i for i, c in enumerate(order)}
    memo.phase = "start"
    memo.remaining = memo.pool = len(start)
    current = None
    if memo(start):
        if not start:
            return result("fp16_passes", passed=True, minimal=True, minimality="empty set", agreed=True)
        current = start
    elif alternatives is not None:
        current = _first_passing(memo, start, alternatives, rank)
    if current is None:
        rest = [c for c in order if c not in start]
        memo.phase = "extend"
        memo.remaining = memo.pool = len(rest)
        size, fails = 1, 0
        while True:  # prefixes of the rest on top of start: 1, 2, 4, ..., all (the all-FP32 plan)
            if not rest:
                return result("fp32_fails", agreed=False)
            size = min(size, len(rest))
            if memo(start | frozenset(rest[:size])):
                break
            if size == len(rest):
                return result("fp32_fails", agreed=False)
            fails, size = size, size * 2
        memo.phase = "split"
        current = start | frozenset(_bisect(memo, rest[:size], base=start, fails=fails))

    return _reduce(memo, result, current, rank, recheck, "certify", start=start)


def _first_passing(memo: _Memo, start: frozenset, alternatives, rank: dict) -> frozenset | None:
    """An alternative that passes, or None when none does (each evaluated at most once, ``width`` at a time).

    ``alternatives(failed)`` is asked with the plans that failed so far (``start`` first) and again, with more,
    each time all it offered failed, until it offers nothing new. Which to try next is learnt from the
    failures: a plan that fails holds a cause (a pin with no effect on the judge, say), so the members common
    to ``start`` and every failed alternative are the suspects, and the next alternative is the one that leaves
    out most of them (then the smallest, then the caller's order).
    """
    failed, offered = [start], {start}
    suspects = set(start)
    while True:
        options = [a for a in dict.fromkeys(frozenset(a) for a in alternatives(tuple(failed))) if a not in offered]
        unknown = [c for a in options for c in a if c not in rank]
        if unknown:
            raise SearchError(f"an alternative holds id(s) that are not candidates, e.g. {unknown[0]!r}")
        if not options:
            return None
        offered.update(options)
        memo.phase = "alternative"
        while options:
            options.sort(key=lambda a: (-len(suspects - a), len(a)))  # stable: ties keep the caller's order
            chunk, options = options[: memo.width], options[memo.width :]
            memo.remaining = len(options) + len(chunk)
            for plan, passed in zip(chunk, memo.many(chunk)):
                if passed:
                    return plan
                if passed is None:  # could not be evaluated: says nothing about the cause
                    continue
                failed.append(plan)
                common = suspects & plan
                suspects = common or suspects  # none in common: more than one cause; keep what was suspected


def _reduce(memo: _Memo, result, current: frozenset, rank: dict, recheck, phase: str,
            start: frozenset | None = None) -> SearchResult:
    """From a passing set to one whose every single removal was evaluated and failed (module docstring, step 4).
    ``start``: the set another oracle gave (the result then says how the answer differs from it)."""
    memo.phase = phase
    memo.remaining = 0
    if memo.width == 1:
        current = _sweep(memo, current, rank, distrusted=start if start is not None and current != start else ())
        if current is None:
            return _fallback(memo, result, f"after {CERTIFY_ROUNDS} sweeps that dropped members, single removals "
                             "still pass: the judging oracle is far from monotone here")
    rounds = 0
    while True:  # every removal evaluated (batched); members whose removal passes are dropped, then check again
        members = sorted(current, key=rank.__getitem__)
        memo.pending = [current - {m} for m in members]
        verdicts = memo.many(memo.pending)
        loose = [m for m, passed in zip(members, verdicts) if passed]
        if not loose:
            break
        rounds += 1
        if rounds > CERTIFY_ROUNDS:  # each round re-evaluates every removal: on a judge this far from monotone, stop
            return _fallback(memo, result, f"after {CERTIFY_ROUNDS} rounds of dropping members, {len(loose)} single "
                             "removal(s) still pass: the judging oracle is far from monotone here")
        if len(loose) > 1 and memo(current - frozenset(loose)):
            current = current - frozenset(loose)
            continue
        for member in reversed(loose):  # the least suspicious first
            if memo(current - {member}):
                current = current - {member}
    compared = {} if start is None else {
        "agreed": current == start,
        "added": tuple(sorted(current - start, key=rank.__getitem__)),
        "dropped": tuple(sorted(start - current, key=rank.__getitem__)),
    }
    if not current:  # every member could go: the all-FP16 plan passed
        return result("fp16_passes", passed=True, minimal=True, minimality="empty set", **compared)
    if recheck is not None:
        confirmed = memo.again(current, recheck)
        if not confirmed:
            return _fallback(memo, result, "the set found " + ("could not be evaluated again" if confirmed is None
                                                                else "failed when evaluated again"))
    unverified = tuple(m for m, passed in zip(members, verdicts) if passed is None)
    if unverified:
        how = (f"{len(unverified)} member(s) kept, not verified: their removal could not be evaluated; every "
               "other removal evaluated and failed")
    else:
        how = "each removal evaluated and failed"
    if memo.contradictions:
        how += f"; the oracle contradicted monotonicity {len(memo.contradictions)} time(s)"
    return result("found", current, passed=True, minimal=not unverified, minimality=how, unverified=unverified,
                  **compared)


def _sweep(memo: _Memo, current: frozenset, rank: dict, distrusted=()) -> frozenset | None:
    """One evaluation at a time: each member's removal, least suspicious first, dropping a member as soon as
    its removal passes; a member whose removal was evaluated on a larger set is evaluated again on the set that
    is left, until every removal of the set was evaluated on it and failed. None after ``CERTIFY_ROUNDS`` sweeps
    that each dropped members. (A batch of all removals, then all removals of what is left, evaluates again
    every member checked before a drop; here only those checked before the last drop, so the members likeliest
    to go are checked first: those of ``distrusted``, a start set the judge failed.)"""
    checked: dict = {}  # member -> the set its removal was evaluated on
    distrusted = frozenset(distrusted)
    for _ in range(CERTIFY_ROUNDS + 1):  # a sweep that drops nothing checks every member on the set: done
        for member in sorted(current, key=lambda m: (m not in distrusted, -rank[m])):
            if member not in current or checked.get(member) == current:
                continue
            memo.pending = [current - {m} for m in current if checked.get(m) != current]
            checked[member] = current
            if memo(current - {member}):
                current = current - {member}
        if all(checked.get(m) == current for m in current):
            memo.pending = []
            return current
    memo.pending = []
    return None


def _fallback(memo: _Memo, result, why: str) -> SearchResult:
    """Smallest plan actually seen to pass (and not seen to fail); never claims minimality."""
    passing = [plan for plan, passed in memo.results.items() if passed]
    if not passing:  # the only passing plan failed when evaluated again: all-FP32 is the last resort
        everything = frozenset(memo.everything)
        if everything not in memo.results:
            memo.phase = "fallback"
            memo(everything)
        passing = [plan for plan, passed in memo.results.items() if passed]
        if not passing:
            return result("fp32_fails")
    best = min(passing, key=len)
    def shown(plan) -> str:
        return "{" + ", ".join(sorted(map(str, plan))) + "}"

    names = "; ".join(
        f"{shown(small)} passed, then failed when evaluated again" if small == big
        else f"{shown(small)} passed but its superset {shown(big)} failed"
        for small, big in memo.contradictions[:3]
    )
    detail = f"not minimal: {why}" + (f" ({names})" if names else "")
    return result("found", best, passed=True, minimal=False, minimality=detail)
