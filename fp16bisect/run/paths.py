"""The files a search writes beside its override JSON (``-o``): their names, in one place.

    overrides.json -> overrides.journal.jsonl        every evaluation of the search (resume replays it)
                      overrides.prior.journal.jsonl  every evaluation of the prior's search on the emulator
                      overrides.plans/               the command backend's per-plan directories
                      overrides.timing.cache         TensorRT's timing cache, shared by the builds of a search
"""

from __future__ import annotations

from pathlib import Path


def journal_path(output: str, prior: bool = False) -> str:
    """Beside the override JSON: overrides.json -> overrides.journal.jsonl, or with ``prior`` (the emulator's
    search that a search on another backend starts from) overrides.prior.journal.jsonl."""
    return str(Path(output).with_suffix(".prior.journal.jsonl" if prior else ".journal.jsonl"))


def plans_dir(output: str) -> str:
    """Beside the override JSON: overrides.json -> overrides.plans/ (the command backend's plan files)."""
    return str(Path(output).with_suffix(".plans"))


def timing_cache_path(output: str) -> str:
    """Beside the override JSON: overrides.json -> overrides.timing.cache (TensorRT's, shared by every build)."""
    return str(Path(output).with_suffix(".timing.cache"))
