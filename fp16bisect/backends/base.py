"""The interface every backend declares (``Backend``) and the typed options one is made with (``Options``).

A backend turns a plan (the candidate ids kept in FP32) into outputs. Two kinds: most run one sample at a
time (``run``); one that judges a plan on several samples at once (the command backend: one command for them)
sets ``whole_plans`` and implements ``run_plan``, which returns every given sample's outputs or a bare verdict
(the oracle gives it the most stressing sample first, then the rest: ``evaluation/whole_plans.py``).
Either raises ``errors.CouldNotEvaluate`` (``BuildFailed`` for a build) for a plan it cannot evaluate. The oracle, the executors and the
pipeline use only what is declared here; the defaults say "nothing to add". A backend holds resources
(sessions, engines, temporary files) from its making to ``close``; use it as ``with backend: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Callable, Literal

BackendName = Literal["emulate", "tensorrt", "command"]
Typing = Literal["strong", "weak"]  # TensorRT: a mixed-precision ONNX per plan, or layer precisions (10.x)


@dataclass(frozen=True)
class Verdict:
    """A whole plan judged by the backend itself, with no outputs to compare (a command's exit code)."""

    passed: bool
    detail: str = ""  # what the verdict rests on, e.g. "exit code 1; stderr: ..."


class Backend:
    name: BackendName
    deterministic: bool = False  # two runs of one plan give the same outputs (else the final set is run again)
    whole_plans: bool = False  # judges a plan on several samples at once: ``run_plan``, not ``run``
    typing: Typing | None = None  # tensorrt only
    progress: Callable[[str], None] | None = None  # where a backend that reports each evaluation says so

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

    def run(self, plan: frozenset, inputs: dict, repeat: int = 0) -> dict:
        """One sample's outputs (output name -> array) with ``plan`` in FP32."""
        raise NotImplementedError(f"the {self.name} backend runs whole plans: call run_plan")

    def run_plan(self, plan: frozenset, inputs_per_sample: list, repeat: int = 0, **kwargs):
        """Every given sample's outputs, or a ``Verdict`` (``whole_plans`` backends only); ``inputs_per_sample``
        is a sequence that may read each sample when it is asked for."""
        raise NotImplementedError(f"the {self.name} backend runs one sample at a time: call run")

    def noise(self, inputs: dict, plan: frozenset = frozenset()) -> tuple | None:
        """Two fresh builds' outputs of ``plan`` (backends whose builds vary), or None: no build noise."""
        return None

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
