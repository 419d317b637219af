"""fp16bisect: find the smallest set of ONNX nodes that must stay in FP32 for an FP16 build to be right.

The Python API (``fp16bisect/api/``) is loaded on first use, so ``import fp16bisect`` stays light::

    import fp16bisect

    result = fp16bisect.search("model.onnx", "sample.npz", tolerance={"atol": 0.05}, judge="emulate")
    result.write("overrides.json")
"""

from fp16bisect.errors import CheckFailed, Error, ToleranceUnreachable, UsageError

__version__ = "0.1.0"

# name -> the module of fp16bisect.api that defines it (PEP 562: imported when first asked for)
_LAZY = {name: "fp16bisect.api.functions" for name in ("search", "check", "scan", "apply")}
_LAZY.update({name: "fp16bisect.api.tools" for name in ("compare", "migrate", "write_report", "CompareResult",
                                                       "MigrateResult")})
_LAZY.update({name: "fp16bisect.api.manifest" for name in ("batch", "BatchResult")})
_LAZY.update({name: "fp16bisect.api.kernels" for name in ("kernel_plan", "KernelPlan")})
_LAZY.update({name: "fp16bisect.api.results" for name in ("SearchResult", "CheckResult", "ScanResult",
                                                         "ApplyResult", "Node", "ScanRow", "ScanNode")})
# the option records the functions take (one per concern; docs/api.md), and the tolerance's
_LAZY.update({name: "fp16bisect.run.options" for name in ("Judge", "Space", "Strategy", "Journaling")})
_LAZY.update({"Parallel": "fp16bisect.parallel", "Tolerance": "fp16bisect.tolerance",
              "GivenTolerance": "fp16bisect.tolerance"})

__all__ = ["ApplyResult", "BatchResult", "CheckFailed", "CheckResult", "CompareResult", "Error", "GivenTolerance",
           "Journaling", "Judge", "KernelPlan", "MigrateResult", "Node", "Parallel", "ScanNode", "ScanResult",
           "ScanRow", "SearchResult", "Space", "Strategy", "Tolerance", "ToleranceUnreachable", "UsageError",
           "__version__", "apply", "batch", "check", "compare", "kernel_plan", "migrate", "scan", "search",
           "write_report"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # asked once
        return value
    raise AttributeError(f"module 'fp16bisect' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
