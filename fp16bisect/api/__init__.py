"""The Python API: ``search``, ``check``, ``scan`` and ``apply`` (``functions.py``); ``compare``, ``migrate`` and
``write_report`` (``tools.py``); ``batch`` (``manifest.py``); their typed results (``results.py``), and what they
accept (``inputs.py``). ``import fp16bisect`` exposes them lazily."""

from fp16bisect.api.manifest import BatchResult, batch
from fp16bisect.api.functions import apply, check, run_check, run_search, scan, search
from fp16bisect.api.results import ApplyResult, CheckResult, Node, ScanNode, ScanResult, ScanRow, SearchResult
from fp16bisect.api.tools import CompareResult, MigrateResult, compare, migrate, write_report
from fp16bisect.errors import Error, ToleranceUnreachable, UsageError

__all__ = ["ApplyResult", "BatchResult", "CheckResult", "CompareResult", "Error", "MigrateResult", "Node",
           "ScanNode", "ScanResult", "ScanRow", "SearchResult", "ToleranceUnreachable", "UsageError", "apply", "batch", "check",
           "compare", "migrate", "run_check", "run_search", "scan", "search", "write_report"]
