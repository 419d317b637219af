"""The search order, built here only: FP32 activation risk first, then the error each candidate causes, measured.

The FP32 profile (``model/profile.py``) names the candidates whose activations
come near the FP16 limits: an overflow or an underflow is found among those
suspects in a handful of evaluations. Where no suspect prefix explains the
failure (accumulated rounding, no single culprit), magnitudes say nothing about
which node matters, so the other candidates are ranked by measured effect: the
worst output error, in units of the tolerance's allowance (the ``excess`` of
``tolerance.compare``; NaN/inf counts as infinite), when that candidate alone
runs in FP16 and every other candidate in FP32. On the emulator a plan is one
run of one session, so the ranking costs one run per candidate and sample and
no engine build; the search itself only receives the resulting order.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Callable, Protocol

from fp16bisect.tolerance import Tolerance, compare

if TYPE_CHECKING:  # the types only: this module imports no model or backend until the ranking runs
    from fp16bisect.backends.base import Backend
    from fp16bisect.evaluation.space import View
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.profile import Profile

# The ranking says its progress a tenth of the candidates at a time, once it has run this long (a quick one says
# nothing more than its start and its end).
QUIET_SECONDS = 2.0


class Watcher(Protocol):
    """What follows the ranking beside the search (``strategy/rounding.py``): told what it measured, and in how
    many seconds."""

    def ranked(self, measured: dict[str, float], seconds: float) -> None: ...


class Stages(Protocol):
    """Whom the ranking tells its progress (``run/outcome.Listener``, a layer above)."""

    def stage(self, text: str) -> None: ...


def effects(backend, samples, tolerance: Tolerance, outputs: list[str], candidates: list[str],
            progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Candidate -> worst excess over outputs and samples when it alone is in FP16 (``backend.run`` plans);
    ``progress(done)`` after each candidate."""
    everything = frozenset(candidates)
    found = {}
    for node in candidates:
        worst = 0.0
        for i, sample in enumerate(samples):
            got = backend.run(everything - {node}, sample.inputs)
            for name in outputs:
                m = compare(got[name], sample.reference[name], tolerance, name, i)
                worst = max(worst, float("inf") if m.nonfinite else m.excess)
        found[node] = worst
        if progress is not None:
            progress(len(found))
    return found


def counter(say: Callable[[str], None], total: int, what: str = "ranking"):
    """``effects``' progress: a line per tenth of the ``total`` candidates measured, with the seconds so far and
    those left at that pace, once the ranking has run ``QUIET_SECONDS``."""
    start, chunk = time.perf_counter(), max(1, math.ceil(total / 10))

    def progress(done: int) -> None:
        spent = time.perf_counter() - start
        if done % chunk == 0 and done < total and spent >= QUIET_SECONDS:
            say(f"{what}: {done} of {total} candidate(s) measured ({spent:.0f} s; about "
                f"{spent / done * (total - done):.0f} s left)")

    return progress


def by_effect(candidates, measured: dict[str, float]) -> list:
    """``candidates`` sorted by measured effect, largest first; ties keep their given order."""
    return sorted(candidates, key=lambda c: -measured.get(c, 0.0))


def search_order(profile_order: list, suspects: int, measured: dict[str, float] | None) -> list:
    """Suspects first (as the profile ranks them), then the rest by measured effect when it was measured."""
    head, rest = list(profile_order[:suspects]), list(profile_order[suspects:])
    return head + (by_effect(rest, measured) if measured is not None else rest)


def prior_order(found: list, prof, measured: dict[str, float]) -> list:
    """For a search starting from the emulator's set: that set first, then every other candidate by measured
    effect (ties in the profile's order)."""
    return list(found) + by_effect([c for c in prof.order if c not in set(found)], measured)


class EffectRanking:
    """The ranking the search calls when no suspect prefix explains the failure: every candidate by the output
    error it causes alone in FP16 (one emulator run each), its progress said as it goes and ``watcher`` told what it
    measured; what it measured stays for what comes after the search (``measured``: candidate -> excess;
    ``order``: the ranking; both None until it ran)."""

    def __init__(self, graph: Graph, backend: Backend, oracle: View, prof: Profile, listener: Stages,
                 watcher: Watcher | None = None) -> None:
        self.graph, self.backend, self.oracle, self.prof, self.listener = graph, backend, oracle, prof, listener
        self.watcher = watcher
        self.measured: dict[str, float] | None = None
        self.order: list[str] | None = None

    def __call__(self) -> list[str]:
        from fp16bisect.backends.emulate import EmulateBackend

        prof, oracle, say = self.prof, self.oracle, self.listener.stage
        runs = len(prof.order) * len(oracle.samples)
        say(f"no suspect prefix explains the failure: ranking the {len(prof.order)} candidate(s) by the output error "
            f"each causes alone in FP16 ({runs} run(s), not evaluations)")
        start = time.perf_counter()
        # on an emulator of our own unless ``backend`` is one: these runs are not evaluations of the search
        runner = self.backend if isinstance(self.backend, EmulateBackend) else EmulateBackend(self.graph)
        self.measured = effects(runner, oracle.samples, oracle.tolerance, oracle.outputs, prof.order,
                                counter(say, len(prof.order)))
        seconds = time.perf_counter() - start
        say(f"ranking: the {len(prof.order)} candidate(s) measured ({seconds:.1f} s)")
        if self.watcher is not None:
            self.watcher.ranked(self.measured, seconds)
        self.order = by_effect(prof.order, self.measured)
        return self.order


def reorder_by_effect(graph: Graph, backend: Backend, oracle: View, prof: Profile, listener: Stages,
                      watcher: Watcher | None = None) -> EffectRanking | None:
    """On a backend that ``ranks_by_effect`` (the emulator): the ranking of every candidate by the output error each
    causes alone in FP16, which the search calls only when no suspect prefix explains the failure (accumulated
    rounding). None on other backends (there the prior brings the ranking)."""
    if not backend.ranks_by_effect:
        return None
    return EffectRanking(graph, backend, oracle, prof, listener, watcher)
