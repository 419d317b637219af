"""The files a search writes beside its override JSON (``-o``): their names, in one place.

    overrides.json -> overrides.journal-<key>.jsonl        every evaluation of the search (resume replays it)
                      overrides.prior.journal-<key>.jsonl  every evaluation of the prior's search on the emulator
                      overrides.plans/               the command backend's per-plan directories
                      overrides.timing.cache         TensorRT's timing cache, shared by the builds of a search

``<key>`` is a short digest of what the search is (``evaluation.journal.journal_key``): another search at the
same ``-o`` journals beside the old one, the same search resumes its own. ``overrides.journal.jsonl`` (no key)
is where searches journaled before keys existed; a search resumes it when it is its own. A finished search
removes its journals once the override JSON is written, unless it keeps them (``remove_journals``).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fp16bisect.evaluation.journal import Journal
    from fp16bisect.strategy.prior import Prior


def journal_path(output: str, key: str = "", prior: bool = False) -> str:
    """Beside the override JSON: overrides.json -> overrides.journal-<key>.jsonl, or with ``prior`` (the
    emulator's search that a search on another backend starts from) overrides.prior.journal-<key>.jsonl; without
    ``key`` the name journals had before they were keyed."""
    key = f"-{key}" if key else ""
    return str(Path(output).with_suffix(f".prior.journal{key}.jsonl" if prior else f".journal{key}.jsonl"))


def latest_journal(output: str) -> str:
    """The search journal beside ``output`` written last (the one a search just interrupted wrote), else the
    pattern their names follow."""
    out = Path(output)
    found = [p for p in out.parent.glob(f"{glob.escape(out.stem)}.journal*.jsonl") if p.is_file()]
    if not found:
        return journal_path(output, "*")
    return str(max(found, key=lambda p: p.stat().st_mtime_ns))


def remove_journals(journal: Journal | None, prior: Prior | None, stopped: bool) -> list[str]:
    """A finished search's journals (its own, ``journal``, and its ``prior``'s), removed once its override JSON is
    written, unless the search keeps them (``SearchOptions.keep_journal``: the journal's ``keep``); the paths
    removed. A search a budget or Ctrl-C ended early (``stopped``) keeps them, and a failed search never gets here:
    its journal stays for the rerun that resumes it."""
    if journal is None or journal.keep or stopped:  # stopped early: it resumes
        return []
    removed = []
    for path in (str(journal.path), prior.journal if prior is not None else ""):
        if path and Path(path).is_file():
            Path(path).unlink()
            removed.append(path)
    return removed


def plans_dir(output: str) -> str:
    """Beside the override JSON: overrides.json -> overrides.plans/ (the command backend's plan files)."""
    return str(Path(output).with_suffix(".plans"))


def timing_cache_path(output: str) -> str:
    """Beside the override JSON: overrides.json -> overrides.timing.cache (TensorRT's, shared by every build)."""
    return str(Path(output).with_suffix(".timing.cache"))
