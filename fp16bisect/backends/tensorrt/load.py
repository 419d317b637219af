"""Import TensorRT or TensorRT-RTX and point Polygraphy at it.

``load()`` imports ``tensorrt``, else ``tensorrt_rtx``, says whether it is weakly typed (TensorRT 10.x:
``BuilderFlag.FP16`` exists) and sets ``POLYGRAPHY_USE_TENSORRT_RTX`` to match: the one place fp16bisect sets it.
Importing this module imports neither TensorRT nor Polygraphy.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from types import ModuleType

from fp16bisect.errors import UsageError

NOT_INSTALLED = (
    "TensorRT is not installed: pip install 'fp16bisect[tensorrt]' on a machine with an NVIDIA GPU, "
    "or use --backend emulate"
)
RTX_SWITCH = "POLYGRAPHY_USE_TENSORRT_RTX"  # read once, when polygraphy.config is first imported


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
    def rtx(self) -> bool:
        return self.flavour == "tensorrt_rtx"


def load() -> TensorRT:
    """Import TensorRT (``tensorrt`` or ``tensorrt_rtx``) and point Polygraphy at it; a UsageError with the fix
    when neither imports, or Polygraphy (which builds and runs every engine) is missing."""
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
        if importlib.util.find_spec("polygraphy") is None:
            raise UsageError("Polygraphy is not installed, and fp16bisect builds and runs TensorRT engines through "
                             "it: pip install 'fp16bisect[tensorrt]'")
        point_polygraphy_at(flavour == "tensorrt_rtx")
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


def point_polygraphy_at(rtx: bool) -> None:
    """Polygraphy drives TensorRT-RTX when ``POLYGRAPHY_USE_TENSORRT_RTX=1`` is set before it is first imported
    (``polygraphy/config.py``); set it so. If Polygraphy was imported already for the other flavour (reading
    Polygraphy JSON samples imports it), its config and its modules' TensorRT imports are made anew."""
    os.environ[RTX_SWITCH] = "1" if rtx else "0"
    config = sys.modules.get("polygraphy.config")
    if config is not None and config.USE_TENSORRT_RTX != rtx:
        rebind_polygraphy(rtx)


def rebind_polygraphy(rtx: bool, assign=setattr) -> None:
    """Set Polygraphy's ``config.USE_TENSORRT_RTX``, and give each Polygraphy module imported so far a fresh
    ``lazy_import_trt()`` (each bound its ``trt`` when imported) and no cached TensorRT logger (made for the other
    module). ``assign``: ``setattr``, or a test's ``monkeypatch.setattr``."""
    import polygraphy.config
    from polygraphy.mod.trt_importer import lazy_import_trt

    assign(polygraphy.config, "USE_TENSORRT_RTX", rtx)
    for name, module in list(sys.modules.items()):
        if name.startswith("polygraphy.") and type(getattr(module, "trt", None)).__name__ == "LazyModule":
            assign(module, "trt", lazy_import_trt())
    util = sys.modules.get("polygraphy.backend.trt.util")
    if util is not None:
        assign(util, "TRT_LOGGER", None)

