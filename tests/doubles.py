"""The one backend double: ``Fake`` says how it behaves, every ``FakeBackend`` made from it does so and records.

By default a FakeBackend is the emulator on its graph (a graph-less one returns ``outputs(plan)``; with
``verdict(plan)`` the Fake makes a ``FakeJudge``, which judges whole plans), with the capabilities declared for its
name (``backends.declared``: Backend's defaults for a name of its own) unless ``capabilities`` says otherwise. Each setting changes one thing, as a real
runtime would: ``fails`` (builds that fail, with their message), ``fused``/``forced`` (a runtime that rounds fewer
or more tensors than the plan says), ``flaky`` (a plan whose rebuilds come out all-FP16), ``stop_at`` (Ctrl-C, or
another exception, on the n-th run, or on each of a set of runs). The settings and the record live on the Fake, so that the backends the
pipeline makes for one search after another share them (``fake_backend`` in conftest.py installs one).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from fp16bisect.backends import Backend, declared
from fp16bisect.backends.base import Verdict
from fp16bisect.errors import BuildFailed


@dataclass
class Fake:
    name: str = "emulate"
    deterministic: bool = False  # Backend's default (the emulator itself says True)
    versions: dict | None = None  # None: the emulator's
    fails: Callable[[frozenset], str | None] = lambda plan: None  # a plan's build error, or None: it builds
    fused: frozenset = frozenset()  # candidates the runtime never rounds (a fused kernel keeps them)
    forced: frozenset = frozenset()  # candidates it always rounds (no FP32 kernel: a pin has no effect)
    flaky: frozenset | None = None  # a plan whose builds after the first come out all-FP16
    stop_at: int | set | None = None  # raise ``stop`` instead of the run numbered so (from 1, over every backend)
    stop: type = KeyboardInterrupt
    tried: int = 0  # runs asked for, the one ``stop`` replaced included
    outputs: Callable[[frozenset], dict] | None = None  # no graph: a plan's outputs
    verdict: Callable[[frozenset], bool] | None = None  # no graph: judges whole plans (``run_plan``)
    runs: list | Counter = field(default_factory=list)  # a list of the plans run, or a Counter of (plan, repeat)
    capabilities: dict = field(default_factory=dict)  # Backend capabilities beyond its name's, e.g. ranks_by_effect

    def backend(self, graph=None) -> FakeBackend | FakeJudge:
        return FakeJudge(self, graph) if self.verdict is not None else FakeBackend(self, graph)

    def record(self, plan: frozenset, repeat: int) -> None:
        self.tried += 1
        if self.tried in ({self.stop_at} if isinstance(self.stop_at, int) else self.stop_at or ()):
            raise self.stop()  # Ctrl-C once (or at each run of a set): the runs after it go on
        if isinstance(self.runs, Counter):
            self.runs[(plan, repeat)] += 1
        else:
            self.runs.append(plan)


DECLARED = ("evaluation_word", "evaluated_thing", "emulator_prior", "ranks_by_effect")  # what a name declares


class _Faked(Backend):
    """What both doubles share: the name, the capabilities, the versions, the record of closes."""

    def __init__(self, fake: Fake, graph=None):
        from fp16bisect.backends.emulate import EmulateBackend

        self.fake, self.closed = fake, 0
        self.name, self.deterministic = fake.name, fake.deterministic
        kind = declared(fake.name)
        for capability, value in {**{c: getattr(kind, c) for c in DECLARED}, **fake.capabilities}.items():
            setattr(self, capability, value)
        self.inner = EmulateBackend(graph) if graph is not None else None

    def versions(self):
        if self.fake.versions is not None:
            return self.fake.versions
        return self.inner.versions() if self.inner else {}

    def close(self):
        self.closed += 1


class FakeBackend(_Faked):
    """Runs one sample at a time (a ``SampleRunner``)."""

    def run(self, plan, inputs, repeat=0):
        fake, plan = self.fake, frozenset(plan)
        error = fake.fails(plan)
        if error:
            raise BuildFailed(error)
        if repeat >= 1 and plan == fake.flaky:
            plan = frozenset()
        fake.record(plan, repeat)
        if self.inner is None:
            return fake.outputs(plan)
        return self.inner.run((plan | fake.fused) - fake.forced, inputs)


class FakeJudge(_Faked):
    """Judges whole plans by ``verdict(plan)`` (a ``PlanJudge``)."""

    def run_plan(self, plan, inputs_per_sample, repeat=0, placeholders=None):
        self.fake.record(frozenset(plan), repeat)
        return Verdict(self.fake.verdict(plan))
