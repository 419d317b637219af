"""The build-noise policy: a tolerance finer than two builds of one plan differ makes verdicts coin flips."""

from __future__ import annotations

from fp16bisect.errors import CouldNotEvaluate, UsageError
from fp16bisect.tolerance import Tolerance, compare


def build_noise(backend, samples, tolerance: Tolerance, noise_ok: bool, listener, journal=None,
                plan: frozenset = frozenset()) -> dict:
    """Output -> max abs difference between two builds of one plan (backends that build engines): all-FP16, or
    the prior's set when there is one (the first plan the search builds anyway: one build saved, none of
    all-FP16).

    Verdicts finer than build-to-build noise are coin flips: a tolerance the two builds do not meet
    against each other is refused unless ``noise_ok``.
    """
    if backend.deterministic:  # the same plan computes the same way every time: no noise to measure
        return {}
    if journal is not None and journal.noise is not None:
        listener.stage("build noise: measured before, read from the journal")
        return journal.noise
    what = f"the engine of the prior's set ({len(plan)} node(s) in FP32)" if plan else "the all-FP16 engine"
    listener.stage(f"building {what} twice to measure build-to-build noise")
    try:
        measured = backend.noise(samples[0].inputs, plan=plan)
    except CouldNotEvaluate as exc:  # the search meets (and records) the same failure
        if plan:  # the all-FP16 engine pins nothing: measure there instead
            listener.stage("build noise: the prior's set did not build as asked (the search reports why); "
                           "measuring on the all-FP16 engine instead")
            return build_noise(backend, samples, tolerance, noise_ok, listener, journal)
        listener.stage(f"could not measure build noise: {exc}")
        return {}
    if measured is None:  # builds that do not vary after all
        return {}
    first, second = measured
    found = {}
    for name, a in first.items():
        m = compare(second[name], a, tolerance, name, 0)
        found[name] = m.max_abs if not m.nonfinite else float("inf")
        if not m.passed and not noise_ok:
            raise UsageError(
                f"two builds of {what} differ beyond the tolerance ({m.why(tolerance)}): "
                "TensorRT picks kernels per build, so verdicts at this tolerance would be noise; loosen "
                "--atol/--rtol, or pass --noise-ok to search anyway"
            )
    listener.stage("build noise: " + ", ".join(f"{k} {v:.3g}" for k, v in found.items()))
    if journal is not None:
        journal.record_noise({k: (v if v != float("inf") else "inf") for k, v in found.items()})
    return found
