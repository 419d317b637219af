"""The line a search on an expensive backend ends with: how the judge's answer relates to the emulator's set."""

from __future__ import annotations


def agreement(result, backend: str) -> str:
    """One line: how the judging backend's answer relates to the emulator's set."""
    if result.agreed:
        return f"{backend} agrees with the emulator: {result.evaluations} evaluation(s) on {backend}"
    if result.status == "fp32_fails":
        return f"{backend} disagrees with the emulator: even all-FP32 misses the tolerance there"
    said = [f"added {len(result.added)}: {_names(result.added)}" if result.added else "",
            f"dropped {len(result.dropped)}: {_names(result.dropped)}" if result.dropped else ""]
    return (f"{backend} disagrees with the emulator: {'; '.join(s for s in said if s) or 'another set'} "
            f"({result.evaluations} evaluation(s) on {backend})")


def _names(ids, limit: int = 5) -> str:
    ids = list(map(str, ids))
    return ", ".join(ids[:limit]) + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")
