"""What hurts BF16 (a precision ranked by rounding, ``Precision.ranked_by``): how much each candidate amplifies
relative rounding, ranked from the FP32 profile.

BF16 keeps FP32's range, so the FP16 suspects (peaks near 65504, values near 6e-8) say nothing about it. What
it loses is precision: every value rounds to 8 significant bits, a relative error up to 2^-8. A candidate in
BF16 reads its inputs rounded; what that does to its output is measured here from the FP32 profile's peaks:

* cancellation (Sub, Add, reductions, MatMul, Conv, normalisations): inputs of magnitude up to A making outputs
  of magnitude up to B carry an absolute error up to about A * 2^-8, that is A/B times BF16's rounding relative
  to the output: the ``amplification`` A/B;
* exponentials (Exp, Pow, Softmax): an input x rounded by x * 2^-8 changes exp(x) by that much relative to
  it: the amplification is the input's peak |x| itself.

Candidates whose amplification is at least ``SUSPECT`` (an output error of 3 % or more) are the suspects the
search tries first, largest first; the rest follow in topological order, and the search ranks them by measured
effect when no suspect prefix explains the failure (``strategy/ranking.py``), as for FP16.
"""

from __future__ import annotations

EXPONENTIAL = {"Exp", "Pow", "Softmax", "LogSoftmax"}
SUSPECT = 8.0  # 8 x 2^-8: about 3 % of the output
NOTED = 2.0


def amplification(graph, node, stats) -> tuple[float, str, str]:
    """(amplification, the input that sets it, why) for one candidate; (0, "", reason) when nothing is known."""
    ins = [(t, stats[t]) for _, t in graph.rounded_inputs(node) if t in stats and not stats[t].sentinel]
    outs = [stats[t] for t in graph.float_outputs(node) if t in stats and not stats[t].sentinel]
    if not ins or not outs:
        return 0.0, "", "no float tensor recorded"
    tensor, widest = max(ins, key=lambda item: item[1].max_abs)
    out = max(s.max_abs for s in outs)
    low = graph.precision.label
    if node.op_type in EXPONENTIAL:
        found = widest.max_abs
        why = f"an exponential reads |x| up to {widest.max_abs:.4g}: {low}'s rounding of x grows {found:.3g}x in it"
    else:
        found = widest.max_abs / out if out > 0 else (float("inf") if widest.max_abs > 0 else 0.0)
        why = (f"reads |x| up to {widest.max_abs:.4g} and writes |y| up to {out:.4g}: {low}'s relative rounding of "
               f"its inputs grows {found:.3g}x in its output")
    return found, tensor, why


def rank_relative(graph, stats) -> list[tuple]:
    """(node id, op type, tier, severity, tensor, reason) of every candidate, most amplifying first: tier 2 from
    ``SUSPECT``, 1 from ``NOTED``, else 0; ties and the rest in topological order."""
    rows = []
    for position, node in enumerate(graph.candidates):
        found, tensor, why = amplification(graph, node, stats)
        tier = 2 if found >= SUSPECT else 1 if found >= NOTED else 0
        rows.append((position, (node.id, node.op_type, tier, found, tensor, f"{graph.precision.label}: {why}")))
    rows.sort(key=lambda r: (-r[1][2], -r[1][3] if r[1][2] >= 2 else 0.0, r[0]))
    return [row for _, row in rows]
