"""What a search or a check judged with, in words: the low precision and the accumulation (and a check's
headroom), each with where it came from ("given", "from overrides.json", "default"), as the first line of their
stdout says it, ``-q`` or not."""

from __future__ import annotations

from fp16bisect.model.precision import precision_of

ACCUMULATION = {"fp32": "FP32", "fp16": "FP16"}


def judged_text(precision: str, accumulate: str, sources: dict[str, str], headroom: float | None = None) -> str:
    """``precision FP16, accumulation FP32 (defaults)``, or each value with its own source when they differ
    (``precision FP16 (from o.json), accumulation FP16 (given)``); ``headroom 4 (...)`` after them when set.
    ``sources``: ``precision``, ``accumulate`` (and ``headroom``) -> ``"given"``, ``"from FILE"`` or
    ``"default"``."""
    said = [("precision", precision_of(precision).label, sources.get("precision", "default")),
            ("accumulation", ACCUMULATION.get(accumulate, accumulate), sources.get("accumulate", "default"))]
    if headroom is not None:
        said.append(("headroom", f"{headroom:g}", sources.get("headroom", "given")))
    if len({source for _, _, source in said}) == 1:
        source = said[0][2]
        return ", ".join(f"{what} {value}" for what, value, _ in said) + \
            f" ({'defaults' if source == 'default' and len(said) > 1 else source})"
    return ", ".join(f"{what} {value} ({source})" for what, value, source in said)


def search_sources(precision: str, accumulate: str) -> dict[str, str]:
    """A search's: each value given, or the default (a search reads no override file)."""
    return {"precision": "default" if precision == "fp16" else "given",
            "accumulate": "default" if accumulate == "fp32" else "given", "headroom": "given"}
