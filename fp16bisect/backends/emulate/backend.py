"""The emulate backend: FP16 emulated on ONNX Runtime CPU, one session of the emulation (``rewrite.py``) running
every plan, a plan given to it as a mask input."""

from __future__ import annotations

import numpy as np
import onnx

from fp16bisect.backends.base import Backend
from fp16bisect.backends.host import host
from fp16bisect.backends.emulate.rewrite import MASK, Emulation
from fp16bisect.backends.emulate.seen import needed, seen
from fp16bisect.backends.emulate.selftest import self_test
from fp16bisect.model.plan_states import states
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import run, session
from fp16bisect.timing import timed


class EmulateBackend(Backend):
    """Runs plans on one ONNX Runtime session; a plan is a set of candidate ids kept in FP32."""

    name = "emulate"
    emulator_prior = False  # it is the emulator: the search already runs on it
    ranks_by_effect = True  # a plan is one run of one session: ranking every candidate costs no build
    strict_versions = ("onnxruntime",)  # its arithmetic is ONNX Runtime's

    def __init__(self, graph: Graph, extra_outputs=(), progress=None, accumulate: str = "fp32", notify=None):
        """``extra_outputs``: inner tensors to return too (the layer-wise comparison reads every candidate's).
        The emulation and its session are set up at the first run (after the FP32 profile has freed its own
        session: never two of them at once), said through ``progress`` with its seconds. ``accumulate``:
        ``"fp16"`` models FP16 accumulation (``accumulate.py``); the accumulators it cannot model are said once
        through ``notify``."""
        self_test(graph.precision)
        self.graph = graph
        self.index = {n.id: i for i, n in enumerate(graph.candidates)}
        self.output_names = [o.name for o in graph.outputs]
        self._extra = [t for t in dict.fromkeys(extra_outputs) if t not in self.output_names]
        self.output_names += self._extra
        self.progress = progress
        self.accumulate = accumulate
        self.notify = notify
        self._emulation: Emulation | None = None
        self._session = None

    @property
    def emulation(self) -> Emulation:
        """The emulation; made here (without a sample: ranks from shape inference alone) if no run made it."""
        if self._emulation is None:
            self._set_up()
        assert self._emulation is not None  # _set_up made it
        return self._emulation

    @property
    def session(self):
        if self._session is None:
            self._set_up()
        return self._session

    def _set_up(self, inputs: dict[str, np.ndarray] | None = None) -> None:
        """The emulation and its session; under ``accumulate="fp16"``, with what a first FP32 run on ``inputs``
        shows of the summing nodes' tensors where shape inference is silent (``seen.py``)."""
        say = self.progress or (lambda text: None)
        seen_here = None
        if self.accumulate == "fp16" and inputs is not None and needed(self.graph):
            with timed(say, "running the model in FP32 once for the shapes its sums run on"):
                seen_here = seen(self.graph, inputs)
        with timed(say, f"setting up the {self.graph.precision.label} emulation of {len(self.index)} candidate(s)"):
            emulation = Emulation(self.graph, self._extra, accumulate=self.accumulate, seen=seen_here)
            if emulation.unmodelled and self.notify is not None:
                self.notify(unmodelled_note(emulation.unmodelled, self.graph.precision.label))
            emulation.model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in self._extra)
            # no constant folding: it would store a rounded copy of every weight beside the weight itself
            self._session = session(emulation.model, "the FP16 emulation of the model", fold_constants=False,
                                    arena=not self.graph.large_activations)
            self._emulation = emulation

    @staticmethod
    def versions() -> dict:
        import onnxruntime as ort

        return {"onnxruntime": ort.__version__, "onnx": onnx.__version__}

    def environment(self) -> dict:
        """The runtime's versions (ONNX Runtime, onnx, NumPy) and the machine (Python, CPU, OS)."""
        return environment_here()

    def mask(self, plan) -> np.ndarray:
        """One bool per candidate, True when the plan keeps it in FP32 (a candidate in FP32 accumulation is
        stored in FP16: the same as FP16 here); then, when the emulation models FP16 accumulation, one per
        accumulator it models, True when the plan keeps it in FP32 or FP32 accumulation (it adds in FP32)."""
        fp32, accumulate = states(plan)
        mask = np.zeros(len(self.index), dtype=bool)
        for node_id in fp32:
            mask[self.index[node_id]] = True
        accumulators = self.emulation.accumulators if self.accumulate == "fp16" else []
        if not accumulators:
            return mask
        adds = mask[accumulators]
        position = {candidate: j for j, candidate in enumerate(accumulators)}
        for node_id in accumulate:  # a mark on a candidate whose sums are not modelled changes nothing
            j = position.get(self.index[node_id])
            if j is not None:
                adds[j] = True
        return np.concatenate([mask, adds])

    deterministic = True  # one session, the same arithmetic every time: a repeat gives the same result

    def run(self, plan, inputs: dict[str, np.ndarray], repeat: int = 0) -> dict[str, np.ndarray]:
        if self._emulation is None:
            self._set_up(inputs)
        feed = dict(inputs)
        feed[MASK] = self.emulation.mask(self.mask(plan))
        values = run(self.session, self.output_names, feed, "the FP16 emulation of the model")
        return dict(zip(self.output_names, values))


def unmodelled_note(unmodelled: list[tuple[str, str, str]], label: str = "FP16", shown: int = 5) -> str:
    """The one line saying which summing nodes keep FP32 sums in the emulation, grouped by why, and what to do."""
    reasons: dict[tuple[str, str], list[str]] = {}
    for node, op_type, why in unmodelled:
        reasons.setdefault((op_type, why), []).append(node)
    said = "; ".join(f"{op_type}, {why}: {', '.join(nodes[:shown])}" + (", ..." if len(nodes) > shown else "")
                     for (op_type, why), nodes in reasons.items())
    return (f"note: --accumulate fp16: {len(unmodelled)} summing node(s) keep FP32 sums in the emulation, their "
            f"{label} state storage only ({said}); 'fp16bisect scan' shows their accumulator headroom, and "
            "'--keep-fp32 NAME' keeps one whose sum may pass the max in FP32")


def environment_here() -> dict:
    """Where an emulated run (or ``apply --verify``'s ONNX Runtime run) evaluates: the emulate backend's
    ``environment``, known without building one."""
    return {"backend": EmulateBackend.name, **EmulateBackend.versions(), "numpy": np.__version__, **host()}
