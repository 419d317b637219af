"""Import TensorRT or TensorRT-RTX and find GPUs: which flavour and version loaded, and how many GPUs CUDA sees.

``load()`` imports ``tensorrt``, else ``tensorrt_rtx`` (a UsageError with the fix when neither imports) and
says whether it is weakly typed (TensorRT 10.x: ``BuilderFlag.FP16`` exists) or strongly typed (TensorRT 11,
TensorRT-RTX). ``gpu_count()`` asks CUDA through cuda-python (``device.py``). Every ``trt.<name>`` used here is listed, with
its documentation page, in ``fp16bisect/backends/tensorrt/api.py``. Importing this module does not import
TensorRT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType

from fp16bisect.errors import UsageError

NOT_INSTALLED = (
    "TensorRT is not installed: pip install 'fp16bisect[tensorrt]' on a machine with an NVIDIA GPU, "
    "or use --backend emulate"
)


@dataclass(frozen=True)
class TensorRT:
    """The imported TensorRT flavour."""

    module: ModuleType
    flavour: str  # "tensorrt" or "tensorrt_rtx"
    version: str
    weakly_typed: bool  # TensorRT 10.x: BuilderFlag.FP16 and layer precisions exist
    # NetworkDefinitionCreationFlag.STRONGLY_TYPED exists (TensorRT 9.0+, so every 10.x; always true on 11/RTX)
    can_strongly_type: bool = True

    def __str__(self) -> str:
        kind = "weakly typed" if self.weakly_typed else "strongly typed"
        return f"{self.flavour} {self.version} ({kind})"

    @property
    def version_tuple(self) -> tuple:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])


def load() -> TensorRT:
    """Import ``tensorrt``, else ``tensorrt_rtx``; a UsageError with the fix when neither imports."""
    broken = []
    for flavour in ("tensorrt", "tensorrt_rtx"):
        try:
            trt = __import__(flavour)
        except ModuleNotFoundError as exc:
            if exc.name != flavour:  # the package is there but a piece of it is missing
                broken.append(f"import {flavour}: {exc}")
            continue
        except (ImportError, OSError) as exc:  # e.g. libnvinfer.so not found
            broken.append(f"import {flavour}: {exc}")
            continue
        return TensorRT(
            module=trt,
            flavour=flavour,
            version=str(getattr(trt, "__version__", "unknown")),
            weakly_typed=hasattr(trt.BuilderFlag, "FP16"),
            can_strongly_type=hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"),
        )
    if broken:
        raise UsageError(
            f"TensorRT is installed but cannot be imported ({'; '.join(broken)}): reinstall it with "
            "pip install 'fp16bisect[tensorrt]' on a machine with an NVIDIA GPU, or use --backend emulate"
        )
    raise UsageError(NOT_INSTALLED)


def gpu_available() -> bool:
    """Whether CUDA sees a GPU (cuda-python ``cudaGetDeviceCount``); never raises."""
    return gpu_count() > 0


def gpu_count() -> int:
    """GPUs CUDA sees (cuda-python ``cudaGetDeviceCount``; 0 when it cannot tell); never raises."""
    from fp16bisect.backends.tensorrt.device import gpu_count as count

    return count()
