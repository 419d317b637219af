"""Environment drift: what changed between where an override file's answer was verified and where ``check`` runs.

The file's ``environment`` (what the judging backend said of itself when the search ended) is compared with
what the check's backend says now, key by key where both have the key; each change is one line
("GPU: NVIDIA A100 (8.0) -> NVIDIA L4 (8.9)", "TensorRT 10.3.0 -> 10.8.0"). ``--strict-environment`` makes
some changes fail the check (exit 1), decided here once:

- the backend (a file verified on tensorrt, checked on emulate: the check did not run where it counts);
- the GPU's name or compute capability, and TensorRT's version or flavour;
- for a file verified on the emulator: the ONNX Runtime version (the emulator's kernels are the judge there);
- for a file verified by a command: the command, or anything its ``--fingerprint`` printed (fp16bisect cannot
  tell which of its keys matter, so all do);
- a file that records no environment (written before fp16bisect recorded one, or by ``migrate`` without
  ``--verify``): "no environment recorded",
  since nothing says where it was verified.

Other changes (the CUDA driver and runtime, onnx, NumPy, Python, the CPU, the OS) are reported, never failed.
A value "unknown" on both sides is no change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from fp16bisect.backends import declared
from fp16bisect.errors import UsageError
from fp16bisect.run.invocation import Invocation, beside
from fp16bisect.run.options import CheckOptions, Judge, SearchOptions

# (key, label, a version: "label a -> b", else "label: a -> b"), in the order changes are said
FIELDS = (("driver", "NVIDIA driver", True), ("cuda_driver", "CUDA driver", True), ("cuda_runtime", "CUDA runtime", True),
          ("onnxruntime", "ONNX Runtime", True), ("onnx", "onnx", True), ("numpy", "NumPy", True),
          ("polygraphy", "Polygraphy", True), ("python", "Python", True), ("cpu", "CPU", False),
          ("machine", "machine", False), ("os", "OS", False), ("command", "command", False))


@dataclass(frozen=True)
class Change:
    what: str  # "GPU", "TensorRT", "ONNX Runtime", "fingerprint gpu", ...
    recorded: str  # in the file
    here: str  # where the check ran
    strict: bool  # --strict-environment fails on it
    version: bool = False  # said "TensorRT 10.3 -> 10.8" rather than "GPU: a -> b"

    def __str__(self) -> str:
        return f"{self.what}{'' if self.version else ':'} {self.recorded} -> {self.here}"

    def to_json(self) -> dict:
        return {"what": self.what, "recorded": self.recorded, "here": self.here, "strict": self.strict}


@dataclass
class Drift:
    """The file's environment against here's; ``again``: the command line to verify the answer again."""

    overrides: str  # the override file's path
    recorded: dict | None  # None: the file records no environment
    here: dict
    strict: bool = False  # --strict-environment
    again: str = ""
    changes: list[Change] = field(default_factory=list)

    @property
    def failing(self) -> list[Change]:
        return [c for c in self.changes if c.strict]

    @property
    def fails(self) -> bool:
        """--strict-environment was given and the file records no environment, or a change it fails on."""
        return self.strict and (self.recorded is None or bool(self.failing))

    def reason(self) -> str:
        """Why --strict-environment fails the check, in one clause."""
        if self.recorded is None:
            return f"--strict-environment: no environment recorded in {self.overrides}"
        return (f"--strict-environment: {self.overrides} was verified elsewhere "
                f"({'; '.join(str(c) for c in self.failing)})")

    def lines(self) -> list[str]:
        """What the console says: the changes and the command to verify again (none when nothing changed)."""
        if self.recorded is None:
            return [f"environment: {self.overrides} records no environment (written before fp16bisect recorded "
                    "one, or by migrate without --verify): cannot compare where it was verified with here; to record it, verify it again: "
                    f"{self.again}"]
        if not self.changes:
            return []
        return [f"environment: {self.overrides} was verified elsewhere ({len(self.changes)} change(s)):",
                *(f"  {c}" + (" (fails --strict-environment)" if c.strict and self.strict else "")
                  for c in self.changes),
                f"verify it again: {self.again}"]

    def to_json(self) -> dict:
        return {"recorded": self.recorded, "here": self.here, "changes": [c.to_json() for c in self.changes],
                "strict": self.strict, "fails": self.fails, "again": self.again}


def compare(overrides: str, recorded: dict | None, here: dict, strict: bool = False) -> Drift:
    """The changes from ``recorded`` (the file's environment, or None) to ``here``."""
    drift = Drift(overrides, recorded, here, strict)
    if recorded is not None:
        drift.changes = changes(recorded, here)
    return drift


def changes(recorded: dict, here: dict) -> list[Change]:
    """Each difference where both sides have the key, the GPU and TensorRT each said as one."""
    verified_on = str(recorded.get("backend", ""))
    found = []
    if verified_on != here.get("backend"):
        found.append(Change("backend", verified_on or "unknown", str(here.get("backend")), True))
    gpu_then, gpu_now = (_gpu(side) for side in (recorded, here))
    if gpu_then is not None and gpu_now is not None and gpu_then != gpu_now:
        found.append(Change("GPU", gpu_then, gpu_now, True))
    trt = _tensorrt(recorded, here)
    if trt is not None:
        found.append(trt)
    for key, label, version in FIELDS:
        if key in recorded and key in here and str(recorded[key]) != str(here[key]):
            strict = key in declared(verified_on).strict_versions
            found.append(Change(label, str(recorded[key]), str(here[key]), strict, version))
    printed = [side.get("fingerprint") or {} for side in (recorded, here)]
    for key in dict.fromkeys([*printed[0], *printed[1]]):
        values = [str(p[key]) if key in p else "absent" for p in printed]
        if values[0] != values[1]:
            found.append(Change(f"fingerprint {key}", values[0], values[1], True))
    return found


def _gpu(side: dict) -> str | None:
    if "gpu" not in side and "compute_capability" not in side:
        return None
    return f"{side.get('gpu', 'unknown')} ({side.get('compute_capability', 'unknown')})"


def _tensorrt(recorded: dict, here: dict) -> Change | None:
    if "tensorrt" not in recorded or "tensorrt" not in here:
        return None
    flavours = [side.get("tensorrt_flavour", "tensorrt") for side in (recorded, here)]
    versions = [str(side["tensorrt"]) for side in (recorded, here)]
    if flavours == [flavours[0]] * 2:
        return None if versions[0] == versions[1] else Change("TensorRT", versions[0], versions[1], True, version=True)
    then, now = (f"{f} {v}" for f, v in zip(flavours, versions))
    return Change("TensorRT", then, now, True)


def again_line(drift: Drift, asked: Invocation, judged: SearchOptions) -> str:
    """The command that verifies the answer again where it counts: the check as ``asked`` (every flag it was
    given) on the backend that verified the file, when this check ran on another; else the search of what it
    ``judged`` (``CheckOptions.judged_with``) on this backend, writing beside the file (its set may differ here)."""
    recorded = drift.recorded or {}
    backend = str(recorded.get("backend") or drift.here.get("backend"))
    # the command it was judged with (here's, when here is the same backend and the file does not say)
    same = backend == drift.here.get("backend")
    command = recorded.get("command") or (drift.here.get("command") if same else None)
    given = judged.judge
    try:
        judge = given.replace(backend=backend, check=command) if same else \
            Judge(backend, check=command, min_shapes=given.min_shapes, opt_shapes=given.opt_shapes,
                  max_shapes=given.max_shapes)
    except UsageError:  # a backend this fp16bisect does not know: the judge as given
        judge = given
    if drift.recorded is not None and not same:
        check = asked.options
        assert isinstance(check, CheckOptions)
        return replace(asked, options=replace(check, judge=judge)).shown()
    found = asked.searching(replace(judged, judge=judge))
    return found.but(beside(drift.overrides, backend)).shown()
