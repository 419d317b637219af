"""A pool of worker processes on this machine, each set up once and reused.

``LocalPool(work, setup, shared, jobs)`` spawns ``jobs`` processes (``spawn``
start method: no forked ONNX Runtime or CUDA state). Each calls
``setup(shared, device)`` once (build an ONNX Runtime session, say) and keeps
what it returns; every task is then ``work(state, arg)`` in whichever process
is idle. ``shared`` (model bytes, samples) is sent once per process, at spawn.

``device``: the worker's label (a GPU id from ``devices``, else its index).
With ``visible_devices=True`` a worker sees only its GPU: ``CUDA_VISIBLE_DEVICES``
is set to it before ``setup`` runs (and before anything imports CUDA there).

A worker that dies (killed, out of memory, a crash in native code) loses only
its task: the process is replaced and the task runs once more; if it dies
again the task's result is a ``Died`` with the reason. An exception raised by
``setup`` or ``work`` is raised again here, in the caller.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterable, Iterator

ATTEMPTS = 2  # a task whose worker dies is run once more, then counted as failed


@dataclass(frozen=True)
class Died:
    """A task whose worker process died on every attempt."""

    reason: str


class WorkerError(Exception):
    """An exception in a worker that could not be sent back as itself."""


def _serve(conn: Connection, work: Callable[[Any, Any], Any], setup: Callable[[Any, str], Any] | None, shared: Any,
           device: str, visible_devices: bool) -> None:
    """A worker's loop: set up once, then one task per message until ``None``."""
    if visible_devices:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    state: Any  # what setup made (its caller's to know), or None
    try:
        state, failure = (setup(shared, device) if setup is not None else None), None
    except BaseException as exc:  # reported with the first task, where the caller waits for an answer
        state, failure = None, exc
    del shared
    try:
        _loop(conn, work, state, failure)
    finally:
        if hasattr(state, "close"):  # free what setup made (a live engine, say) before the process ends
            state.close()


def _loop(conn: Connection, work: Callable[[Any, Any], Any], state: Any, failure: BaseException | None) -> None:
    while True:
        try:
            arg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if arg is None:
            return
        if failure is not None:
            _send(conn, "error", failure)
            continue
        try:
            result = work(state, arg)
        except BaseException as exc:
            _send(conn, "error", exc)
            continue
        conn.send(("ok", result))


def _send(conn: Connection, kind: str, exc: BaseException) -> None:
    try:
        conn.send((kind, exc))
    except Exception:  # an exception that does not pickle: its text and where it came from
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        conn.send((kind, WorkerError(f"{text} (in a worker process)")))


def death_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            how = f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"killed by signal {-exitcode}"
    else:
        how = f"exit code {exitcode}"
    return f"its worker process died ({how}) on each of {ATTEMPTS} attempts"


class _Worker:
    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.task: int | None = None  # index of the task it is running


class LocalPool:
    """``jobs`` worker processes; ``run(args)`` yields ``(index, result)`` as tasks complete."""

    def __init__(self, work: Callable[[Any, Any], Any], setup: Callable[[Any, str], Any] | None = None,
                 shared: Any = None, jobs: int = 1, devices: Iterable[object] | None = None,
                 visible_devices: bool = False) -> None:
        self.work = work
        self.setup = setup
        self.shared = shared
        self.devices = [str(d) for d in devices] if devices else [str(i) for i in range(jobs)]
        self.width = len(self.devices)
        self.visible_devices = visible_devices
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker | None] = [None] * self.width

    def _spawn(self, slot: int) -> _Worker:
        mine, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_serve, args=(theirs, self.work, self.setup, self.shared, self.devices[slot], self.visible_devices),
            daemon=True, name=f"fp16bisect-worker-{self.devices[slot]}",
        )
        process.start()
        theirs.close()
        return _Worker(process, mine)

    def run(self, args: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """Yields ``(index, result)`` for every arg, in completion order; ``result`` is ``work``'s return value
        or a ``Died``. Exceptions from ``setup`` or ``work`` propagate (the other tasks are abandoned)."""
        args = list(args)
        queue = list(range(len(args)))
        attempts = [0] * len(args)
        done = 0
        try:
            while done < len(args):
                self._hand_out(args, queue, attempts)
                busy = [w for w in self._workers if w is not None and w.task is not None]
                ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
                for slot, worker in enumerate(self._workers):
                    if worker is None or worker.task is None:
                        continue
                    if worker.conn in ready or worker.process.sentinel in ready:
                        index = worker.task
                        kind, value = self._receive(slot, worker)
                        if kind == "died" and attempts[index] < ATTEMPTS:
                            queue.insert(0, index)
                            continue
                        if kind == "error":
                            raise value
                        done += 1
                        yield index, Died(death_reason(value)) if kind == "died" else value
        except BaseException:
            self.close(force=True)  # tasks still running are abandoned: their workers go with them
            raise

    def _hand_out(self, args: list, queue: list[int], attempts: list[int]) -> None:
        """The next queued tasks to the idle workers, spawning those not running."""
        for slot, worker in enumerate(self._workers):
            if not queue:
                break
            if worker is None:
                worker = self._workers[slot] = self._spawn(slot)
            if worker.task is None:
                worker.task = queue.pop(0)
                attempts[worker.task] += 1
                worker.conn.send(args[worker.task])

    def _receive(self, slot: int, worker: _Worker) -> tuple[str, Any]:
        """What a ready worker sent, ``("ok", result)`` or ``("error", exception)`` (then its task is done), or
        ``("died", exit code)`` when its process died with the task (then its slot is freed)."""
        try:
            message = worker.conn.recv() if worker.conn.poll() else None
        except (EOFError, OSError):
            message = None
        if message is None:
            worker.process.join(5)
            worker.conn.close()
            self._workers[slot] = None
            return "died", worker.process.exitcode
        worker.task = None
        return message

    def close(self, force: bool = False) -> None:
        for worker in self._workers:
            if worker is None:
                continue
            try:
                if force or worker.task is not None:
                    worker.process.kill()
                else:
                    worker.conn.send(None)
            except (OSError, ValueError):
                pass
        for worker in self._workers:
            if worker is None:
                continue
            worker.process.join(10)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(5)
            worker.conn.close()
        self._workers = [None] * self.width

    def __enter__(self) -> "LocalPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
