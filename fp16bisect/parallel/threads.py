"""A pool of threads in this process, each with a state of its own: for work that waits on other processes.

The command backend's evaluations are shell commands: a thread per slot waits
for its command, so no worker process is needed, and what the backend reports
(progress lines) stays in this process. ``ThreadPool`` has ``LocalPool``'s
interface: ``setup(shared, device)`` once per slot, then ``work(state, arg)``
on whichever slot is free; ``run(args)`` yields ``(index, result)`` as tasks
complete, and an exception in ``work`` is raised in the caller.
"""

from __future__ import annotations

import queue
import threading


class ThreadPool:
    def __init__(self, work, setup=None, shared=None, jobs: int = 1, devices=None):
        self.work = work
        self.setup = setup
        self.shared = shared
        self.devices = [str(d) for d in devices] if devices else [str(i) for i in range(jobs)]
        self.width = len(self.devices)
        self._states: list = [None] * self.width
        self._ready = [False] * self.width

    def _state(self, slot: int):
        if not self._ready[slot]:
            self._states[slot] = self.setup(self.shared, self.devices[slot]) if self.setup is not None else None
            self._ready[slot] = True
        return self._states[slot]

    def run(self, args):
        args = list(args)
        todo: queue.Queue = queue.Queue()
        for index in range(len(args)):
            todo.put(index)
        done: queue.Queue = queue.Queue()
        stop = threading.Event()

        def serve(slot: int) -> None:
            while not stop.is_set():
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((index, "ok", self.work(self._state(slot), args[index])))
                except BaseException as exc:  # raised again in the caller
                    done.put((index, "error", exc))
                    return

        threads = [threading.Thread(target=serve, args=(slot,), daemon=True)
                   for slot in range(min(self.width, len(args)))]
        for thread in threads:
            thread.start()
        try:
            for _ in range(len(args)):
                index, kind, value = done.get()
                if kind == "error":
                    raise value
                yield index, value
        finally:
            stop.set()
            for thread in threads:
                thread.join()

    def close(self, force: bool = False) -> None:
        for slot, state in enumerate(self._states):
            if self._ready[slot] and hasattr(state, "close"):
                state.close()
        self._states = [None] * self.width
        self._ready = [False] * self.width

    def __enter__(self) -> "ThreadPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
