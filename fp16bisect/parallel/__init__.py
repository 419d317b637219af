"""Parallel evaluation: the executor the Oracle hands independent plans to (worker processes on this machine,
or Ray tasks on a cluster), and ``batch``'s pool of whole checks and searches."""

from fp16bisect.parallel.executor import Parallel, PlanExecutor, make_executor, one_line_at_a_time, parse_devices

__all__ = ["Parallel", "PlanExecutor", "make_executor", "one_line_at_a_time", "parse_devices"]
