"""Several plans at once: worker processes (``processes``), Ray tasks (``ray``) or, for commands, threads here.

The search proposes independent plans (``search(test_many=, width=)``); the
Oracle hands those not yet known to a ``PlanExecutor``, which runs them on a
pool and yields each ``Evaluation`` as it completes (the Oracle journals it
then). A worker holds its own backend, built once from the model bytes and
samples it received once: an ONNX Runtime session per process for
``emulate``, one GPU per worker for ``tensorrt`` (``one_gpu_per_worker``); a backend that
``evaluates_in_threads`` (``command``) is shared by threads of this process instead.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol

from fp16bisect.backends.base import Backend, Options
from fp16bisect import records
from fp16bisect.errors import UsageError
from fp16bisect.parallel.processes import Died, LocalPool
from fp16bisect.tolerance import Tolerance

if TYPE_CHECKING:  # workers import what they evaluate with when they make it, not with this module
    from fp16bisect.evaluation.oracle import Evaluation, SampleOrder
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.samples import Sample


def _devices(value: object, name: str) -> tuple[str, ...]:
    """GPU ids: ``"0,1,3"`` (the flag's text), a list of ids, or None."""
    if value is None or value == "" or value == ():
        return ()
    if isinstance(value, (list, tuple)) and all(isinstance(d, (int, str)) and not isinstance(d, bool) for d in value):
        value = ",".join(map(str, value))
    if not isinstance(value, str):
        raise UsageError(f"{name} {value!r}: give GPU ids, e.g. '0,1' or [0, 1]")
    return tuple(parse_devices(value))


def _ray(value: object, name: str) -> str | None:
    """A Ray address ("" a local Ray instance, "auto", host:port) or None; Ray must import (said before any work)."""
    address = records.text()(value, name)
    if address is not None:
        from fp16bisect.parallel.ray import load_ray

        load_ray()
    return address


@dataclass(frozen=True)
class Parallel(records.Record):
    """How evaluations run: ``jobs`` at once; ``devices`` GPU ids (one worker each, tensorrt and command);
    ``ray``: None for local processes, else a Ray address ("" for a local Ray instance, "auto", host:port)."""

    SHORTHAND = "jobs"

    jobs: int = records.option(1, records.whole(1, what="the number of evaluations to run at once,"),
                               "evaluate up to N plans at once", metavar="N", short="-j")
    devices: tuple = records.option((), _devices, "GPUs, one worker each", metavar="0,1,...",
                                    unset="the first --jobs GPUs")
    ray: str | None = records.option(None, _ray, "evaluate as Ray tasks (pip install 'fp16bisect[ray]')",
                                     metavar="ADDRESS", nargs="?", const="")

    @property
    def serial(self) -> bool:
        return self.jobs <= 1 and self.ray is None and not self.devices


@dataclass(frozen=True)
class Job:
    """What every worker needs, sent once: the model, the samples (with references), how to judge."""

    backend: str  # its name: what a worker makes its own copy of the backend from (with ``options``)
    model: bytes
    path: str
    sha256: str
    options: Options  # without what writes to this console
    samples: list
    tolerance: Tolerance
    outputs: list
    workdir: str = ""  # where a worker's work directory goes: inside this process's, which removes it with its own


def setup_backend(job: Job, device: str) -> WorkerState:
    """In a worker: the backend, built once, with what this worker needs of its own (``Backend.for_worker``)."""
    import onnx

    from fp16bisect.backends import make_backend
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.precision import precision_of

    graph = Graph(onnx.load_model_from_string(job.model), Path(job.path) if job.path else None, job.sha256,
                  workdir=job.workdir or None, precision=precision_of(job.options.precision))
    return WorkerState(make_backend(job.backend, graph, job.options, device=device), job, device)


def setup_in_process(shared: tuple[Backend, Job], device: str) -> WorkerState:
    """In a thread of this process (the command backend): this process's backend, and the slot's device."""
    backend, job = shared
    return WorkerState(backend, job, device, owned=False)


@dataclass
class WorkerState:
    """A worker's backend, the job it serves and its device (the command backend's ``{device}``)."""

    backend: Backend
    job: Job
    device: str = "0"
    owned: bool = True  # made for this worker: closed with it

    def close(self) -> None:
        if self.owned:
            self.backend.close()



def evaluate_task(state: WorkerState, arg: tuple) -> Evaluation:
    """In a worker: one plan's evaluation (every sample, every repeat)."""
    from fp16bisect.evaluation.oracle import Judging, SampleOrder, evaluate_plan

    plan, first_repeat, repeats, *order = arg  # order: which samples, in what order (evaluation.oracle)
    job = state.job
    judging = Judging(job.samples, job.tolerance, job.outputs, order[0] if order and order[0] else SampleOrder())
    return evaluate_plan(state.backend, judging, frozenset(plan), range(first_repeat, first_repeat + repeats),
                         placeholders={"device": state.device})


class Pool(Protocol):
    """What runs tasks (``LocalPool``, ``RayPool``, ``ThreadSlots``): ``width`` at once, each ``(index, result)``
    yielded as it completes (a ``Died`` when its worker died)."""

    width: int

    def run(self, args: Iterable[Any]) -> Iterator[tuple[int, Any]]: ...

    def close(self, force: bool = False) -> None: ...


class PlanExecutor:
    """Evaluates plans on a pool; ``evaluate`` yields each ``Evaluation`` as it completes. A plan whose worker
    died twice is a failed evaluation with the reason (a failed build, never dropped)."""

    def __init__(self, pool: Pool, where: str) -> None:
        self.pool = pool
        self.width = pool.width
        self.where = where  # for messages: "4 worker processes", "Ray (8 CPUs)"

    def evaluate(self, plans: Iterable[frozenset], first_repeat: int = 0, repeats: int = 1,
                 order: SampleOrder | None = None) -> Iterator[Evaluation]:
        started = time.perf_counter()
        asked = list(plans)
        for index, result in self.pool.run([(p, first_repeat, repeats, order) for p in asked]):
            if isinstance(result, Died):
                result = _died(asked[index], result.reason, time.perf_counter() - started)
            yield result

    def close(self) -> None:
        self.pool.close()


def _died(plan: Iterable, reason: str, seconds: float) -> Evaluation:
    from fp16bisect.evaluation.oracle import Evaluation, Reason

    return Evaluation(frozenset(plan), False, (), seconds, reason=Reason("died", reason))


def make_executor(parallel: Parallel, backend: Backend, graph: Graph, samples: list[Sample], tolerance: Tolerance,
                  outputs: list[str], options: Options) -> PlanExecutor | None:
    """A ``PlanExecutor`` for ``backend`` (this process's, made with ``options``), or None when serial: what it
    declares says how (threads sharing it, or workers that rebuild it from its name and options; one GPU each)."""
    uses_devices = backend.uses_device and parallel.devices  # the emulator has no use for --devices
    if parallel.jobs <= 1 and parallel.ray is None and not uses_devices:
        return None
    gpu = backend.one_gpu_per_worker
    if backend.evaluates_in_threads and parallel.ray is None:  # it waits on other processes: threads here
        job = Job(backend.name, b"", str(graph.path or ""), graph.sha256, options, samples, tolerance, outputs)
        threads = ThreadSlots(evaluate_task, setup_in_process, (backend, job), jobs=parallel.jobs,
                              devices=parallel.devices or None)
        return PlanExecutor(threads, f"{threads.width} concurrent command(s)")
    # callables (progress, notify) write to this process's console: they stay here
    remote = options.here_only()
    if parallel.ray is not None:  # other machines: the model file's own bytes
        model = graph.path.read_bytes() if graph.path else graph.model.SerializeToString()
    else:  # processes here: the loaded model, which refers to the weight files already written (no copy)
        model = graph.model.SerializeToString()
    here_dir = str(graph.store.directory) if parallel.ray is None and graph.store is not None else ""
    if parallel.ray is not None:  # other machines cannot read this one's sample files: the arrays go
        samples = [s.held() if hasattr(s, "held") else s for s in samples]
    job = Job(backend.name, model, str(graph.path or ""), graph.sha256, remote, samples, tolerance, outputs,
              here_dir)
    if parallel.ray is not None:
        from fp16bisect.parallel.ray import RayPool

        tasks = RayPool(evaluate_task, setup_backend, job, jobs=parallel.jobs if parallel.jobs > 1 else 0, gpu=gpu,
                        address=parallel.ray or None)
        return PlanExecutor(tasks, f"Ray, {tasks.width} task(s) at once")
    devices = list(parallel.devices)
    if gpu and not devices:
        from fp16bisect.backends.tensorrt.device import gpu_count

        devices = [str(i) for i in range(gpu_count())][: parallel.jobs]  # --jobs N: the first N GPUs
    if gpu:  # one worker per device
        if not devices:
            raise UsageError("no GPU visible: pass --devices 0,1,... or run on a machine with NVIDIA GPUs")
        pool = LocalPool(evaluate_task, setup_backend, job, devices=devices, visible_devices=gpu)
        return PlanExecutor(pool, f"{pool.width} worker(s), one per device ({', '.join(devices)})")
    pool = LocalPool(evaluate_task, setup_backend, job, jobs=parallel.jobs)
    return PlanExecutor(pool, f"{pool.width} worker processes")


class ThreadSlots:
    """Threads of this process (``concurrent.futures``), for work that waits on other processes (the command
    backend's commands): each thread is a slot, set up once with ``setup(shared, device)``; ``run(args)`` yields
    ``(index, work(state, arg))`` as tasks complete, and an exception in ``work`` is raised here. The same
    interface as ``LocalPool``."""

    def __init__(self, work: Callable[[Any, Any], Any], setup: Callable[[Any, str], Any] | None = None,
                 shared: Any = None, jobs: int = 1, devices: Iterable[object] | None = None) -> None:
        self.work, self.setup, self.shared = work, setup, shared
        self.devices = [str(d) for d in devices] if devices else [str(i) for i in range(jobs)]
        self.width = len(self.devices)
        self._slots = iter(range(self.width))
        self._local = threading.local()
        self._states: list = []
        self._pool = ThreadPoolExecutor(self.width, initializer=self._claim)

    def _claim(self) -> None:  # a thread's slot: its device, and its state once set up
        self._local.device = self.devices[next(self._slots)]

    def _task(self, arg: Any) -> Any:
        if not hasattr(self._local, "state"):
            self._local.state = self.setup(self.shared, self._local.device) if self.setup is not None else None
            self._states.append(self._local.state)
        return self.work(self._local.state, arg)

    def run(self, args: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        futures = {self._pool.submit(self._task, arg): index for index, arg in enumerate(args)}
        try:
            for done in as_completed(futures):
                yield futures[done], done.result()
        finally:
            for future in futures:
                future.cancel()

    def close(self, force: bool = False) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for state in self._states:
            if state is not None and hasattr(state, "close"):
                state.close()
        self._states = []

    def __enter__(self) -> "ThreadSlots":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def one_line_at_a_time(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` for lines that may come from several threads (a backend's progress when its plans are evaluated in
    threads): one at a time to the console. Given to the backend when it is made."""
    lock = threading.Lock()

    def said(text: str) -> None:
        with lock:
            say(text)

    return said


def parse_devices(text: str | None) -> list[str]:
    """``--devices 0,1,3`` -> ["0", "1", "3"]."""
    if not text:
        return []
    devices = [d.strip() for d in text.split(",")]
    if any(not d for d in devices) or len(set(devices)) != len(devices):
        raise UsageError(f"--devices {text!r}: give distinct GPU ids separated by commas, e.g. --devices 0,1,2,3")
    return devices
