"""The lightest set hitting every conflict, exactly: a 0-1 program solved by HiGHS (``scipy.optimize.milp``).

``algorithm/hitting.py`` (``search --minimum``) asks it once per round: minimise the weight of the chosen candidates
such that each conflict holds at least one. Why scipy and not python-sat: HiGHS takes real weights (the cost
objective) as they are, where MaxSAT wants integers; scipy ships wheels for every platform onnxruntime does and is
kept by a large team; and the program is tiny (a few hundred candidates, as many conflicts), which HiGHS solves in
milliseconds. scipy is needed only for ``--minimum``: without it the loop says how to install it (the pure-Python
branch and bound of ``algorithm/hitting.py`` solves instances of a few candidates, the tests' and tiny models').
"""

from __future__ import annotations

from typing import Mapping

from fp16bisect.algorithm.hitting import exact_hitting_set
from fp16bisect.errors import UsageError

__all__ = ["hitting_set", "require_solver"]

# Candidates up to which the pure-Python branch and bound is used when scipy is absent.
PURE_PYTHON_UP_TO = 12


def require_solver(candidates: int) -> None:
    """UsageError when ``--minimum`` would need scipy and it is not installed."""
    if candidates <= PURE_PYTHON_UP_TO:
        return
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise UsageError("search --minimum needs scipy (its HiGHS solver) for more than "
                         f"{PURE_PYTHON_UP_TO} candidates: pip install 'fp16bisect[minimum]' (or scipy)") from None


def hitting_set(conflicts: list, weights: Mapping) -> frozenset | None:
    """The lightest set meeting every conflict (None: a conflict is empty, so none does). With shared weights
    (``hitting.Weights.shared``: pairs a set weighs less with), one more variable per pair, at most either member
    (the objective takes it as high as it may: 1 exactly when both are in), makes the program exact."""
    if any(not c for c in conflicts):
        return None
    shared = dict(getattr(weights, "shared", None) or {})
    if not conflicts:
        return frozenset()
    ids = sorted({c for conflict in conflicts for c in conflict} | {c for pair in shared for c in pair}, key=repr)
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix
    except ImportError:
        return exact_hitting_set(conflicts, weights)
    column = {c: i for i, c in enumerate(ids)}
    pairs = [sorted(pair, key=repr) for pair in shared if len(pair) == 2]
    width = len(ids) + len(pairs)
    rows = [r for r, conflict in enumerate(conflicts) for _ in conflict]
    cols = [column[c] for conflict in conflicts for c in conflict]
    values = [1.0] * len(rows)
    for k, (a, b) in enumerate(pairs):  # z_k - x_a <= 0 and z_k - x_b <= 0
        for r, c in ((2 * k, a), (2 * k + 1, b)):
            rows += [len(conflicts) + r] * 2
            cols += [len(ids) + k, column[c]]
            values += [1.0, -1.0]
    matrix = coo_matrix((values, (rows, cols)), shape=(len(conflicts) + 2 * len(pairs), width)).tocsr()
    lower = np.concatenate([np.ones(len(conflicts)), np.full(2 * len(pairs), -np.inf)])
    upper = np.concatenate([np.full(len(conflicts), np.inf), np.zeros(2 * len(pairs))])
    cost = np.array([float(weights.get(c, 1.0)) for c in ids] + [-shared[frozenset(p)] for p in pairs])
    integrality = np.concatenate([np.ones(len(ids)), np.zeros(len(pairs))])
    solved = milp(cost, constraints=LinearConstraint(matrix, lb=lower, ub=upper), integrality=integrality,
                  bounds=Bounds(0, 1))
    if solved.x is None:
        raise RuntimeError(f"the hitting-set program was not solved: {solved.message}")
    return frozenset(c for c, x in zip(ids, solved.x) if x > 0.5)
