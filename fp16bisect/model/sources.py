"""Where samples come from: ``--inputs``/``--reference`` values expanded into files, and references matched to inputs.

A value is a file, a directory (every ``*.npz`` in it, sorted by name) or a glob (``'data/*.npz'``, expanded here
with ``glob.glob``, sorted). A file is an ``.npz`` of named arrays, a Polygraphy JSON file (``polygraphy run
--save-inputs``/``--save-outputs``: several samples) or, for inputs, a data-loader script ``FILE.py[:FUNC]``
(Polygraphy's convention: ``FUNC``, default ``load_data``, yields feed dicts).

References pair with inputs by position when both sides are plain files (the n-th reference file is the n-th
inputs file's), and by file name as soon as either side names a directory or a glob (``inputs/0007.npz`` with
``refs/0007.npz``).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fp16bisect.errors import UsageError

SCRIPT_FUNCTION = "load_data"  # Polygraphy's default data-loader function
_MAGIC = set("*?[")


@dataclass(frozen=True)
class Source:
    """One file a value names: ``kind`` npz | json | script (``function``: a script's loader function, or the
    runner whose outputs a Polygraphy JSON file of outputs gives); or ``memory``, a sample given as a mapping
    of name -> array (the Python API), ``path`` its name in messages."""

    path: str
    kind: str
    function: str = ""
    arrays: Mapping | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        """What a reference is matched by: the file's name."""
        return Path(self.path).name

    def __str__(self) -> str:
        return f"{self.path}:{self.function}" if self.function else self.path


def expand(values: list, flag: str) -> tuple[list[Source], bool]:
    """The files ``values`` name, in order, and whether any value was a directory or a glob."""
    found: list[Source] = []
    spread = False
    for i, value in enumerate(values):
        if isinstance(value, Mapping):
            found.append(Source(f"{'sample' if flag == '--inputs' else 'reference'} {i}", "memory", arrays=value))
            continue
        value = str(value)
        script = _script(value)
        head, sep, runner = value.rpartition(":")
        if sep and head.lower().endswith(".json") and runner and not Path(value).exists():
            found.append(Source(head, "json", runner))  # FILE.json:RUNNER, one runner of Polygraphy's outputs
        elif script is not None:
            if flag != "--inputs":
                raise UsageError(f"{flag} {value!r} is a data-loader script: scripts give inputs; pass them with "
                                 "--data-loader-script, and the references as .npz or Polygraphy JSON")
            found.append(script)
        elif Path(value).is_dir():
            spread = True
            files = sorted(p for p in os.listdir(value) if p.endswith(".npz") and Path(value, p).is_file())
            if not files:
                raise UsageError(f"{flag} {value!r} is a directory with no .npz file: put one .npz per sample in it "
                                 "(numpy.savez(path, name=array, ...)), or name the files")
            found += [Source(str(Path(value) / p), "npz") for p in files]
        elif _MAGIC & set(value) and not Path(value).exists():
            spread = True
            files = sorted(p for p in glob.glob(value) if Path(p).is_file())
            if not files:
                raise UsageError(f"{flag} {value!r} matches no file: check the pattern (quote it, so that fp16bisect "
                                 "expands it, not the shell)")
            found += [Source(p, _kind(p)) for p in files]
        else:
            found.append(Source(value, _kind(value)))
    return found, spread


def _kind(path: str) -> str:
    return "json" if path.lower().endswith(".json") else "npz"


def _script(value: str) -> Source | None:
    """``FILE.py`` or ``FILE.py:FUNC`` as a data-loader script; None for anything else."""
    path, function = value, SCRIPT_FUNCTION
    head, sep, tail = value.rpartition(":")
    if sep and head.endswith(".py") and tail.isidentifier():
        path, function = head, tail
    if not path.endswith(".py"):
        return None
    return Source(path, "script", function)


def pair(inputs: list, references: list | None) -> list[tuple[list[Source], list[Source]]]:
    """Groups of inputs files and their reference files, as the module's docstring says: within a group the
    n-th sample read from the inputs files takes the n-th read from the reference files (none: computed)."""
    sources, spread = expand(inputs, "--inputs")
    if not references:
        return [([s], []) for s in sources]
    refs, ref_spread = expand(references, "--reference")
    if spread or ref_spread:
        return [([s], [r]) for s, r in _by_name(sources, refs)]
    if any(s.kind in ("json", "script") for s in (*sources, *refs)):  # these hold several samples each
        return [(sources, refs)]  # counted when read
    if len(refs) != len(sources):
        raise UsageError(
            f"{len(sources)} --inputs file(s) but {len(refs)} --reference file(s): "
            "pass one reference per inputs file, in the same order"
        )
    return [([s], [r]) for s, r in zip(sources, refs)]


def _by_name(sources: list[Source], refs: list[Source]) -> list[tuple[Source, Source]]:
    for side, flag in ((sources, "--inputs"), (refs, "--reference")):
        names = [s.name for s in side]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UsageError(f"{flag} names several files called {_few(twice)}: references are matched to inputs "
                             "by file name, so each name must be unique on each side")
        odd = [s for s in side if s.kind != "npz"]
        if odd:
            raise UsageError(f"{flag} {str(odd[0])!r} is not an .npz file, which references are matched by with a "
                             "directory or glob: give .npz files on both sides")
    by_name = {r.name: r for r in refs}
    lonely = [s.name for s in sources if s.name not in by_name]
    known = {s.name for s in sources}
    unused = [r.name for r in refs if r.name not in known]
    if lonely or unused:
        said = ([f"no --reference for inputs {_few(lonely)}"] if lonely else []) + \
               ([f"no --inputs for reference {_few(unused)}"] if unused else [])
        raise UsageError(f"references are matched to inputs by file name: {'; '.join(said)}: give each reference "
                         "the file name of its inputs")
    return [(s, by_name[s.name]) for s in sources]


def _few(names: list[str], shown: int = 5) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
