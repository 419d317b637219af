"""Tasks for the worker pools in test_parallel.py, in a module that imports almost nothing: a spawned worker
imports it by name, and importing the test module there would load pytest, hypothesis, ONNX and NumPy."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def die_once(_state, arg):
    """Kills its own process the first time it meets ``marker`` (a file it creates), then answers."""
    marker, value = arg
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return value


def die_always(_state, arg):
    if arg == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return arg


def visible(_state, _arg):
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def square(_state, x):
    return x * x


def setup_fails(_shared, _device):
    from fp16bisect.errors import UsageError

    raise UsageError("no such input 'x': pass an npz with the model's inputs")


def setup_fake_tensorrt(job, device):
    """A worker of the tensorrt backend without TensorRT or a GPU: the test double of TensorRT 10.x
    (tests/fake_tensorrt.py) builds weakly typed, and an engine 'runs' by emulating exactly the nodes its layers ran in
    FP32 (read back from the built engine), as in test_tensorrt.py's ``engines_run_as_built``."""
    import fake_tensorrt
    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.backends.tensorrt import backend as backend_module
    from fp16bisect.backends.tensorrt import device as trt_device
    from fp16bisect.parallel.executor import setup_backend
    from test_tensorrt import ran_in_fp32

    fake_tensorrt.install(fake_tensorrt.make())
    trt_device.gpu_count = lambda: 1
    emulators = {}

    def execute(self, key, engine, inputs):
        return emulators.setdefault(id(self.graph), EmulateBackend(self.graph)).run(ran_in_fp32(self.graph, engine),
                                                                                    inputs)

    backend_module.TensorRTBackend._execute = execute
    return setup_backend(job, device)


def slot_device(state, arg):
    """(the device its slot was set up for, arg): which slot ran it."""
    return state, arg


def device_as_state(_shared, device):
    return device
