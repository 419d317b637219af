"""Evaluations as Ray tasks, on an existing cluster or a local one (``pip install 'fp16bisect[ray]'``).

``RayPool`` has ``LocalPool``'s interface. The shared data (model bytes,
samples with their references) goes once into Ray's object store
(``ray.put``); each task receives its reference inside a list, so Ray does not
fetch it for every task: a worker process fetches it and runs ``setup`` once,
the first time it meets it, and keeps the state for the tasks that follow.
``max_retries=1``: a task whose worker dies runs once more, then its result
is a ``Died`` with Ray's reason. ``num_gpus=1`` for GPU work (Ray then sets
``CUDA_VISIBLE_DEVICES`` for the task), one CPU otherwise.
"""

from __future__ import annotations

import uuid
from types import ModuleType
from typing import Any, Callable, Iterable, Iterator

from fp16bisect.errors import UsageError
from fp16bisect.parallel.processes import Died

INSTALL = "Ray is not installed: pip install 'fp16bisect[ray]' (or pip install 'ray>=2.9'), or drop --ray"

_STATES: dict = {}  # in a Ray worker process: pool key -> what setup returned


def load_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise UsageError(INSTALL) from None
    return ray


def connect(address: str | None, num_cpus: int | None = None) -> ModuleType:
    """``ray.init`` once per process: ``address`` an existing cluster (``auto``: the one this machine belongs
    to), None a local one started here."""
    ray = load_ray()
    if not ray.is_initialized():
        options = {"address": address} if address else {"num_cpus": num_cpus}
        try:
            ray.init(**options, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
        except ConnectionError as exc:
            raise UsageError(f"cannot connect to the Ray cluster at {address!r} ({exc}): start it with "
                             "'ray start --head', or give its address (ray://host:10001, or auto)") from None
    return ray


def _task(work: Callable[[Any, Any], Any], setup: Callable[[Any, str], Any] | None, shared: list, key: str,
          arg: Any) -> Any:
    if key not in _STATES:
        import ray

        for old in _STATES.values():  # one search's backend at a time per worker process (a session can be large)
            if hasattr(old, "close"):
                old.close()
        _STATES.clear()
        device = ",".join(map(str, ray.get_gpu_ids())) or "0"  # Ray set CUDA_VISIBLE_DEVICES for a GPU task
        _STATES[key] = setup(ray.get(shared[0]), device) if setup is not None else None
    return work(_STATES[key], arg)


class RayPool:
    """Tasks on a Ray cluster; ``run(args)`` yields ``(index, result)`` as tasks complete."""

    def __init__(self, work: Callable[[Any, Any], Any], setup: Callable[[Any, str], Any] | None = None,
                 shared: Any = None, jobs: int = 0, gpu: bool = False, address: str | None = None) -> None:
        ray = connect(address, num_cpus=jobs or None)
        self._ray = ray
        self.work, self.setup = work, setup
        self.key = uuid.uuid4().hex
        self._shared = [ray.put(shared)]  # once, into the object store; tasks get the reference
        resources = ray.cluster_resources()
        slots = int(resources.get("GPU" if gpu else "CPU", 0))
        self.width = max(1, jobs or slots)
        if gpu and slots == 0:
            raise UsageError("the Ray cluster has no GPU, and the tensorrt backend needs one per task: "
                             "connect to a cluster with GPUs (--ray ADDRESS), or use --backend emulate")
        self._remote = ray.remote(_task).options(
            num_gpus=1 if gpu else 0, num_cpus=0 if gpu else 1, max_retries=1, retry_exceptions=False,
        )

    def run(self, args: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        args = list(args)
        pending: dict = {}
        next_arg = 0
        while next_arg < len(args) or pending:
            while next_arg < len(args) and len(pending) < self.width:
                ref = self._remote.remote(self.work, self.setup, self._shared, self.key, args[next_arg])
                pending[ref] = next_arg
                next_arg += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # our code raised: raise it here as itself
                    for other in pending:
                        ray.cancel(other, force=True)
                    cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
                    raise cause from None
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.ObjectLostError) as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    result = Died(f"its Ray worker died on each of 2 attempts ({type(exc).__name__}: {first})")
                yield index, result

    def close(self, force: bool = False) -> None:
        """The cluster stays up (it may be shared); the object store frees the data when nothing refers to it."""
        self._shared = []

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
