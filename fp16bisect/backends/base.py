"""What every backend declares (``Backend``: its name, its capabilities, where it evaluates), the two ways one
evaluates (``SampleRunner``, ``PlanJudge``) and the typed options one is made with (``Options``).

A backend turns a plan (the candidate ids kept in FP32) into outputs, one of two ways, each a Protocol:
most run one sample at a time (``SampleRunner.run``); one that judges a plan on several samples at once (the
command backend: one command for them) is a ``PlanJudge``, whose ``run_plan`` returns every given sample's outputs
or a bare ``Verdict`` (the oracle gives it the most stressing sample first, then the rest:
``evaluation/whole_plans.py``). The oracle asks which one an object is (``isinstance``), never its name.
Either raises ``errors.CouldNotEvaluate`` (``BuildFailed`` for a build) for a plan it cannot evaluate.

What callers need to know of a backend is a capability it declares on its class (``Backend``'s class
attributes: the defaults are those of a new, expensive backend on this machine), so that a new backend needs no
edit outside its own definition; ``declared(name)`` (``backends/__init__.py``) reads them from a recorded name.
A backend holds resources (sessions, engines, temporary files) from its making to ``close``; use it as
``with backend: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Callable, Literal, Protocol, runtime_checkable

BackendName = Literal["emulate", "tensorrt", "command"]
Typing = Literal["strong", "weak"]  # TensorRT: a mixed-precision ONNX per plan, or layer precisions (10.x)


@dataclass(frozen=True)
class Verdict:
    """A whole plan judged by the backend itself, with no outputs to compare (a command's exit code)."""

    passed: bool
    detail: str = ""  # what the verdict rests on, e.g. "exit code 1; stderr: ..."


@runtime_checkable
class SampleRunner(Protocol):
    """Runs one sample of a plan: that sample's outputs (output name -> array) with ``plan`` in FP32."""

    def run(self, plan: frozenset, inputs: dict, repeat: int = 0) -> dict: ...


@runtime_checkable
class PlanJudge(Protocol):
    """Judges a whole plan on several samples at once: every given sample's outputs (compared by the oracle), or
    a ``Verdict``; ``inputs_per_sample`` is a sequence that may read each sample when it is asked for;
    ``placeholders``: more values for what it runs (``{"device": "1"}``)."""

    def run_plan(self, plan: frozenset, inputs_per_sample, repeat: int = 0,
                 placeholders: dict | None = None) -> list | Verdict: ...


class Backend:
    """The part every backend shares: its name, what it can do, where it evaluates, its lifetime. A backend is
    this plus ``SampleRunner`` or ``PlanJudge``."""

    name: str
    # -- capabilities: what callers ask instead of the name
    evaluation_word: str = "built"  # what evaluating a plan is called in messages ("could not be built")
    evaluated_thing: str = "engine"  # what is evaluated ("the engine could not be built")
    deterministic: bool = False  # two runs of one plan give the same outputs (else the final set is run again)
    uses_device: bool = False  # --devices means something to it (a GPU per worker, a command's {device})
    one_gpu_per_worker: bool = False  # each worker process owns one GPU (CUDA_VISIBLE_DEVICES; Ray: num_gpus=1)
    evaluates_in_threads: bool = False  # concurrent plans are threads of this process sharing it (it waits on
    # other processes), not workers that rebuild it
    emulator_prior: bool = True  # the emulator's search is a useful start for it (--prior auto); False: it is the
    # emulator, or as cheap
    ranks_by_effect: bool = False  # cheap enough to rank every candidate by its effect alone (ranking.py)
    times_layers: bool = False  # layer_times(plan, inputs): per node, ms from its engine's profile (tensorrt)
    runs_a_command: bool = False  # judges with the user's command (--check, --keep-plans belong to it)
    strict_versions: tuple[str, ...] = ()  # environment keys whose change can change its verdicts (check)
    typing: Typing | None = None  # tensorrt only
    progress: Callable[[str], None] | None = None  # where a backend that reports each evaluation says so

    @classmethod
    def for_worker(cls, options: Options, device: str) -> Options:
        """The options a worker process (labelled ``device``) makes its own copy of this backend with: what it
        needs apart from the other workers (TensorRT: its own timing cache file). By default the same."""
        return options

    @property
    def journal_name(self) -> str:
        """What the journal calls this judge (another command is another judge: its verdicts are not replayed)."""
        return self.name

    def versions(self) -> dict:
        """Names and versions of what evaluates (written into the override JSON)."""
        return {}

    def environment(self) -> dict:
        """Where this backend evaluates, as the override JSON's ``environment`` records it and ``check`` compares
        it: string values (``"unknown"`` for what cannot be told; the command backend's ``fingerprint`` is its
        own object). By default the backend's name and ``versions()``; each backend adds what it knows."""
        return {"backend": self.name, **self.versions()}

    def describe(self) -> dict:
        """More to say in the override JSON's "backend" (the command, the typing), beyond name and versions."""
        return {"typing": self.typing} if self.typing else {}

    def noise(self, inputs: dict, plan: frozenset = frozenset()) -> tuple | None:
        """Two fresh builds' outputs of ``plan`` (backends whose builds vary), or None: no build noise."""
        return None

    def layer_times(self, plan: frozenset, inputs: dict) -> dict:
        """With ``times_layers``: per node id, the milliseconds its engine layers took running ``inputs``."""
        return {}

    def close(self) -> None:
        """Free what the backend holds."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


DEFAULT_TIMING_CACHE = "fp16bisect.timing.cache"  # in the working directory, when no -o says where


@dataclass(frozen=True)
class TensorRTOptions:
    timing_cache: str | None = None  # None: beside -o (``SearchOptions.beside_output``), else DEFAULT_TIMING_CACHE

    @property
    def timing_cache_file(self) -> str:
        return self.timing_cache or DEFAULT_TIMING_CACHE
    opt_level: int | None = None  # builder optimisation level
    typing: Typing | None = None  # None: strong where the version has it


@dataclass(frozen=True)
class CommandOptions:
    command: str = ""  # the shell command with placeholders ({model}, {inputs}, ...)
    plans_dir: str | None = None  # where each plan's files go
    keep_plans: bool = False


@dataclass(frozen=True)
class Options:
    """What a backend is made with: what every backend may use, then each backend's own."""

    input_shapes: dict | None = None  # input name -> shape of the samples (TensorRT optimisation profiles)
    tolerance: dict | None = None  # written into each plan's override file (command)
    precision: str = "fp16"  # the low precision of every plan (model/precision.py): fp16 or bf16
    accumulate: str = "fp32"  # what the judge assumes FP16 nodes add in (model/plan_states.py); emulate models fp16
    notify: Callable[[str], None] | None = field(default=None, compare=False)  # one-line notices, said once
    progress: Callable[[str], None] | None = field(default=None, compare=False)  # a line per evaluation
    tensorrt: TensorRTOptions = TensorRTOptions()
    command: CommandOptions = CommandOptions()

    @classmethod
    def of(cls, flat: dict | None = None, **more) -> Options:
        """From flat keys (``timing_cache``, ``command``, ``notify``, ...), as the CLI and manifests give them;
        a key no backend knows is an error (a typo would otherwise be ignored)."""
        flat = {k: v for k, v in {**(flat or {}), **more}.items() if v is not None}
        mine = {f.name for f in fields(cls)} - {"tensorrt", "command"}
        parts = {"tensorrt": TensorRTOptions, "command": CommandOptions}
        unknown = set(flat) - mine - {f.name for part in parts.values() for f in fields(part)}
        if unknown:
            raise TypeError(f"unknown backend option(s): {', '.join(sorted(unknown))}")
        made = {name: part(**{f.name: flat[f.name] for f in fields(part) if f.name in flat})
                for name, part in parts.items()}
        return cls(**{k: flat[k] for k in mine if k in flat}, **made)

    def here_only(self) -> Options:
        """Without what writes to this process's console (for workers elsewhere)."""
        return replace(self, notify=None, progress=None)
