"""The search's journal: one JSON line per evaluation, flushed to disk before the next one starts.

On a GPU an evaluation is an engine build of seconds to minutes and a search
can run for an hour. Rerunning the same command after Ctrl-C, a kill -9 or a
crash replays the journal instead of repeating finished evaluations. The first
line says what search it belongs to (model hash, backend, tolerance, samples,
repeats, and the --headroom factor and the deployment's shape profile when given); a journal of another search is refused, never mixed in. A line cut
short by a kill is ignored. Its file name carries a short digest of that first
line (``journal_key``), so another search beside the same ``-o`` (a looser
tolerance, another model) starts its own journal instead of meeting this one. Plain text, ``git bisect log`` style: inspectable
with ``head`` and ``jq``.

Besides evaluations (lines with a ``plan``), a journal may hold the build noise
measured before searching (a ``noise`` line) and, on an expensive backend, the
result of the emulator's search that served as the prior (a ``prior`` line:
its set, the order it handed on, its counts), so that a resumed search neither
reruns the prior nor needs the emulator at all. The prior's own evaluations
have their own journal (``*.prior.journal-<key>.jsonl``).

A journal is for resuming: once the search has finished and its override JSON is written, it is removed
(``run.paths.remove_journals``, the prior's with it) unless the search keeps it (``keep``: ``--keep-journal``).
A search interrupted, refused or failed keeps its journal, so the same command resumes.

An evaluation is marked before it runs (a ``started`` line, the plan's sorted ids, with ``recheck`` k for a
recheck) and written after (its ``plan`` line). An evaluation the process unwinds from (Ctrl-C, an exception) is
unmarked (an ``abandoned`` line): a resumed search runs it again. A plan started and never finished nor abandoned
is one the process died evaluating without unwinding (a segfault in an in-process build, the OOM killer, kill -9):
rerunning it would most likely kill the search again, on every resume, forever. So a resumed search records it as
could not evaluate (reason ``died``, the ``plan`` line marked ``"crashed": true``), which the search steers around
and never counts as evidence; ``Journal(retry_crashed=True)`` evaluates such plans again instead. Journals written
before these marks (``plan`` lines alone) read as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from fp16bisect.errors import UsageError
from fp16bisect.model.samples import Sample, update_digest
from fp16bisect.evaluation.verdicts import Evaluation, Reason

SCHEMA = "fp16bisect.journal/1"
KEYS = ("model_sha256", "backend", "tolerance", "samples", "repeats", "headroom", "shapes")  # the last two: when given
CRASHED = ("the process died evaluating this plan (a crash or a kill); fp16bisect search --retry-crashed "
           "evaluates it again")


def samples_digest(samples: Iterable[Sample]) -> str:
    """What the user gave: the inputs, and the references when given (computed ones follow from them).

    Call it before references are computed."""
    digest = hashlib.sha256()
    for sample in samples:
        for part in (sample.inputs, sample.reference or {}):
            update_digest(digest, part)
        digest.update(b"\1")
    return digest.hexdigest()


def journal_key(header: dict) -> str:
    """A short digest of what a search is (its journal header, whatever keys it holds): the same search, the same
    key; another model, samples, tolerance, backend (its verdict-changing options) or repeats, another key."""
    what = {k: v for k, v in header.items() if k != "schema"}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def _key(plan: Iterable, entry: dict) -> tuple[frozenset, int]:
    """What a started, abandoned or finished line is about: the plan, and which recheck of it (0: none)."""
    return frozenset(plan), int(entry.get("recheck") or 0)


def _torn_plan(tail: bytes) -> frozenset | None:
    """The plan of a finished or abandoned line cut short by a kill, when its ids were written whole: that
    evaluation had ended when the process died, so it is not one the process died in."""
    for prefix in (b'{"plan": ', b'{"abandoned": '):
        if tail.startswith(prefix):
            try:
                ids, _ = json.JSONDecoder().raw_decode(tail[len(prefix):].decode("utf-8", "replace"))
                return frozenset(ids) if isinstance(ids, list) else None
            except (ValueError, TypeError):
                return None
    return None


class Journal:
    """``retry_crashed``: plans a process died evaluating (started, never finished: module docstring) are
    evaluated again, and so are those recorded as such by an earlier resume; by default they are recorded as could
    not evaluate (reason ``died``) and never run again. ``keep``: the journal outlives its finished search
    (else it is removed once the override JSON is written)."""

    def __init__(self, path: str | Path, header: dict, restart: bool = False, retry_crashed: bool = False,
                 keep: bool = True):
        self.path = Path(path)
        self.header = {"schema": SCHEMA, **header}
        self.retry_crashed = retry_crashed
        self.keep = keep
        self.entries: list[dict] = []  # evaluations
        self.noise: dict | None = None  # the build-to-build noise measured before searching (TensorRT)
        self.prior: dict | None = None  # the emulator's result that the search on this backend started from
        # the plans a process died evaluating, as found on loading (rechecks too): replayed as could not evaluate
        # ("died"), or, with retry_crashed, evaluated again
        self.crashed: list[frozenset] = []
        self._open: set[tuple] = set()  # (plan, recheck) started by this process, neither finished nor abandoned
        self.fresh = not (self.path.exists() and not restart)
        if self.fresh:
            self._start()
        else:
            self._load()

    @staticmethod
    def belongs(path: str | Path, header: dict) -> bool:
        """Whether the journal at ``path`` exists and was written by the search ``header`` describes."""
        try:
            with open(path, "rb") as f:
                first = json.loads(f.readline())
        except (OSError, ValueError, UnicodeDecodeError):
            return False
        return isinstance(first, dict) and first.get("schema") == SCHEMA and all(
            first.get(k) == header.get(k) for k in KEYS)

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
        lines = self._checked_lines()
        unfinished = self._read(lines[1:-1])  # the text after the last newline may be cut short: never read
        if lines[-1]:  # drop the torn tail so the next line starts clean
            with open(self.path, "wb") as f:
                f.write(b"\n".join(lines[:-1]) + b"\n")
            ended = _torn_plan(lines[-1])  # a kill while its result was being written: run it again, no crash
            for key in [k for k in unfinished if k[0] == ended]:
                del unfinished[key]
        self._crashed(unfinished)

    def _checked_lines(self) -> list[bytes]:
        """The journal's lines (the last one empty, or cut short by a kill), once its header says it is this
        search's."""
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
        return lines if len(lines) > 1 else [*lines, b""]  # the header alone, its newline lost

    def _read(self, lines: list[bytes]) -> dict[tuple, list]:
        """The evaluations, noise and prior the lines hold, kept; the plans started and then neither finished nor
        abandoned returned ((plan, recheck) -> ids). A line that is not JSON (cut short by a kill in an older run)
        or not one this program wrote is skipped."""
        unfinished: dict[tuple, list] = {}
        for raw in lines:
            try:
                entry = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(entry, dict):
                continue
            try:
                if isinstance(entry.get("plan"), list):
                    unfinished.pop(_key(entry["plan"], entry), None)
                    self.entries.append(entry)
                elif isinstance(entry.get("started"), list):
                    unfinished[_key(entry["started"], entry)] = entry["started"]
                elif isinstance(entry.get("abandoned"), list):
                    unfinished.pop(_key(entry["abandoned"], entry), None)
                elif isinstance(entry.get("noise"), dict):
                    self.noise = entry["noise"]
                elif isinstance(entry.get("prior"), dict):
                    self.prior = entry["prior"]
            except (TypeError, ValueError):  # ids that cannot be a plan: not a line this program wrote
                continue
        return unfinished

    def _crashed(self, unfinished: dict[tuple, list]) -> None:
        """Record the plans a process died evaluating as could not evaluate, or with ``retry_crashed`` drop their
        records so they run again. A plan evaluated to the end at any time (a retry) is replayed from that."""
        finished = {_key(e["plan"], e) for e in self.entries if not e.get("crashed")}
        crashed = {_key(e["plan"], e): e["plan"] for e in self.entries if e.get("crashed")}
        new = {key: ids for key, ids in unfinished.items() if key not in finished and key not in crashed}
        self.crashed = [key[0] for key in {**crashed, **new} if key not in finished]
        self.entries = [e for e in self.entries
                        if not (e.get("crashed") and (self.retry_crashed or _key(e["plan"], e) in finished))]
        if self.retry_crashed:
            return
        for (plan, recheck), ids in new.items():
            died = Evaluation(frozenset(ids), False, (), 0.0, reason=Reason("died", CRASHED))
            self.append({**died.to_json(), "crashed": True, **({"recheck": recheck} if recheck else {})})

    def start(self, plan: Iterable, recheck: int = 0) -> None:
        """Mark a plan's evaluation (``recheck`` k: its k-th recheck) started, on disk, before it runs."""
        ids = sorted(plan)
        self._write({"started": ids, **({"recheck": recheck} if recheck else {})})
        self._open.add(_key(ids, {"recheck": recheck}))

    def abandon(self, plans: Iterable[Iterable], recheck: int = 0) -> None:
        """Unmark the evaluations among ``plans`` that were started here and have not finished: the process is
        unwinding (Ctrl-C, an exception), not dying, so a resumed search runs them again. Best effort: a journal
        that cannot be written must not hide what is unwinding."""
        for plan in plans:
            key = _key(plan, {"recheck": recheck})
            if key in self._open:
                try:
                    self._write({"abandoned": sorted(plan), **({"recheck": recheck} if recheck else {})})
                except OSError:
                    return
                self._open.discard(key)

    def append(self, entry: dict) -> None:
        """An evaluation, written and flushed to disk before the caller goes on."""
        self._write(entry)
        self._open.discard(_key(entry["plan"], entry))
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
