"""The Python API: ``search``, ``check``, ``scan`` and ``apply`` (``functions.py``), their typed results
(``results.py``), and what they accept (``inputs.py``). ``import fp16bisect`` exposes them lazily."""

from fp16bisect.api.functions import apply, check, run_check, run_search, scan, search
from fp16bisect.api.results import ApplyResult, CheckResult, Node, ScanResult, ScanRow, SearchResult
from fp16bisect.errors import Error, ToleranceUnreachable, UsageError

__all__ = ["ApplyResult", "CheckResult", "Error", "Node", "ScanResult", "ScanRow", "SearchResult", "ToleranceUnreachable",
           "UsageError", "apply", "check", "run_check", "run_search", "scan", "search"]
