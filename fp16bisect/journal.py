"""The search's journal: one JSON line per evaluation, flushed to disk before the next one starts.

On a GPU an evaluation is an engine build of seconds to minutes and a search
can run for an hour. Rerunning the same command after Ctrl-C, a kill -9 or a
crash replays the journal instead of repeating finished evaluations. The first
line says what search it belongs to (model hash, backend, tolerance, samples,
repeats); a journal of another search is refused, never mixed in. A line cut
short by a kill is ignored. Plain text, ``git bisect log`` style: inspectable
with ``head`` and ``jq``.

Besides evaluations (lines with a ``plan``), a journal may hold the build noise
measured before searching (a ``noise`` line) and, on an expensive backend, the
result of the emulator's search that served as the prior (a ``prior`` line:
its set, the order it handed on, its counts), so that a resumed search neither
reruns the prior nor needs the emulator at all. The prior's own evaluations
have their own journal (``*.prior.journal.jsonl``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


from .errors import UsageError
from .model.samples import update_digest

SCHEMA = "fp16bisect.journal/1"
KEYS = ("model_sha256", "backend", "tolerance", "samples", "repeats")


def samples_digest(samples) -> str:
    """What the user gave: the inputs, and the references when given (computed ones follow from them).

    Call it before references are computed."""
    digest = hashlib.sha256()
    for sample in samples:
        for part in (sample.inputs, sample.reference or {}):
            update_digest(digest, part)
        digest.update(b"\1")
    return digest.hexdigest()


class Journal:
    def __init__(self, path: str | Path, header: dict, restart: bool = False):
        self.path = Path(path)
        self.header = {"schema": SCHEMA, **header}
        self.entries: list[dict] = []  # evaluations
        self.noise: dict | None = None  # the build-to-build noise measured before searching (TensorRT)
        self.prior: dict | None = None  # the emulator's result that the search on this backend started from
        self.fresh = not (self.path.exists() and not restart)
        if self.fresh:
            self._start()
        else:
            self._load()

    def discard_if_unused(self) -> None:
        """Remove a journal this run started and never wrote an evaluation to (a refusal writes nothing)."""
        if self.fresh and not self.entries and self.noise is None and self.prior is None:
            self.path.unlink(missing_ok=True)

    def _start(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(json.dumps(self.header) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise UsageError(f"cannot write the journal {str(self.path)!r} ({exc.strerror}): choose another -o path") \
                from None

    def _load(self) -> None:
        try:
            lines = self.path.read_bytes().split(b"\n")
        except OSError as exc:
            raise UsageError(f"cannot read the journal {str(self.path)!r} ({exc.strerror}): pass --restart") from None
        try:
            header = json.loads(lines[0])
        except (ValueError, UnicodeDecodeError):
            header = None
        if not isinstance(header, dict) or header.get("schema") != SCHEMA:
            raise UsageError(f"{str(self.path)!r} is not an fp16bisect journal: pass --restart to replace it, "
                             "or choose another -o path")
        differs = [k for k in KEYS if header.get(k) != self.header.get(k)]
        if differs:
            raise UsageError(
                f"the journal {str(self.path)!r} belongs to another search (its {', '.join(differs)} differ): "
                "pass --restart to discard it, or choose another -o path"
            )
        if len(lines) == 1:  # the header alone, its newline lost
            lines.append(b"")
        for raw in lines[1:-1]:  # the text after the last newline may be cut short: never read
            try:
                entry = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue  # a line cut short by a kill in an older run
            if isinstance(entry, dict) and isinstance(entry.get("plan"), list):
                self.entries.append(entry)
            elif isinstance(entry, dict) and isinstance(entry.get("noise"), dict):
                self.noise = entry["noise"]
            elif isinstance(entry, dict) and isinstance(entry.get("prior"), dict):
                self.prior = entry["prior"]
        if lines[-1]:  # drop the torn tail so the next line starts clean
            with open(self.path, "wb") as f:
                f.write(b"\n".join(lines[:-1]) + b"\n")

    def append(self, entry: dict) -> None:
        """An evaluation, written and flushed to disk before the caller goes on."""
        self._write(entry)
        self.entries.append(entry)

    def record_noise(self, noise: dict) -> None:
        self._write({"noise": noise})
        self.noise = noise

    def record_prior(self, prior: dict) -> None:
        self._write({"prior": prior})
        self.prior = prior

    def _write(self, entry: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, allow_nan=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
