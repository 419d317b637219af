"""The pass rule: the ``Tolerance`` an output is judged by (``values.py``, its forms in ``rules.py``) and the error
metrics that judge it (``metrics.py``)."""

from fp16bisect.tolerance.metrics import (ACCEPT, EXACT, METRICS_ONLY, OutputMetrics, accepted, compare, compare_many,
                                          cosine_of, per_tensor, worst_per_output)
from fp16bisect.tolerance.values import (DEFAULT_ATOL, DEFAULT_RTOL, NOT_REPRODUCIBLE, TIE, Accept, GivenTolerance,
                                         PerOutput, Tolerance)

__all__ = ["ACCEPT", "DEFAULT_ATOL", "DEFAULT_RTOL", "EXACT", "METRICS_ONLY", "NOT_REPRODUCIBLE", "TIE", "Accept",
           "GivenTolerance", "OutputMetrics", "PerOutput", "Tolerance", "accepted", "compare", "compare_many",
           "cosine_of", "per_tensor", "worst_per_output"]
