"""The GPU and the CUDA versions an engine is built on, asked of cuda-python's runtime API; never raises.

Only documented cuda-python calls (``cuda.bindings.runtime``, cuda-python 12.6+; ``cuda.cudart`` before; see
https://nvidia.github.io/cuda-python/cuda-bindings/latest/module/runtime.html), each returning a tuple whose
first item is a ``cudaError_t``:

    cudaGetDeviceCount()            -> (err, count)
    cudaGetDevice()                 -> (err, device): the calling thread's current device
    cudaGetDeviceProperties(device) -> (err, cudaDeviceProp): ``name`` (bytes), ``major`` and ``minor`` (the
                                       compute capability)
    cudaDriverGetVersion()          -> (err, version): the latest CUDA the driver supports, 1000*major + 10*minor
                                       (0: no driver)
    cudaRuntimeGetVersion()         -> (err, version): the CUDA runtime's version, same encoding

What CUDA cannot tell (no cuda-python, no driver, no device: TensorRT-RTX imports and builds on a CPU-only
machine) is ``"unknown"``.

The NVIDIA driver's own release (550.54.15, not the CUDA version it supports) is asked of ``nvidia-smi``, which
the driver installs, through its scripting query: ``nvidia-smi --query-gpu=driver_version --format=csv,noheader
-i DEVICE`` (``nvidia-smi --help-query-gpu``); "unknown" without it.
"""

from __future__ import annotations

from types import ModuleType

UNKNOWN = "unknown"


def cuda_runtime() -> ModuleType:
    """cuda-python's runtime module (``cuda.bindings.runtime``, else ``cuda.cudart``); ImportError without it."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        from cuda import cudart  # cuda-python < 12.6
    return cudart


def ask(cudart: ModuleType, call: str, *args):
    """The value of ``cudart.<call>(*args)`` when it answers cudaSuccess, else None (an error, or it raised)."""
    try:
        err, *value = getattr(cudart, call)(*args)
        if err != cudart.cudaError_t.cudaSuccess:
            return None
        return value[0] if len(value) == 1 else tuple(value)
    except Exception:
        return None


def cuda_version(encoded) -> str:
    """CUDA's ``1000*major + 10*minor`` as ``major.minor`` (12040 -> "12.4"); "unknown" for 0 or None."""
    if not encoded:
        return UNKNOWN
    return f"{int(encoded) // 1000}.{int(encoded) % 1000 // 10}"


def device() -> dict[str, str]:
    """The current device's name and compute capability, the driver's and the runtime's CUDA versions."""
    found = {"gpu": UNKNOWN, "compute_capability": UNKNOWN, "driver": UNKNOWN, "cuda_driver": UNKNOWN,
             "cuda_runtime": UNKNOWN}
    try:
        cudart = cuda_runtime()
    except ImportError:
        return found
    found["cuda_driver"] = cuda_version(ask(cudart, "cudaDriverGetVersion"))
    found["cuda_runtime"] = cuda_version(ask(cudart, "cudaRuntimeGetVersion"))
    current = ask(cudart, "cudaGetDevice")
    props = ask(cudart, "cudaGetDeviceProperties", current if current is not None else 0)
    if props is not None:
        name = props.name.decode("utf-8", "replace") if isinstance(props.name, bytes) else str(props.name)
        found["gpu"] = name.split("\x00")[0].strip() or UNKNOWN
        found["compute_capability"] = f"{props.major}.{props.minor}"
        found["driver"] = driver_release(current if current is not None else 0)
    return found


def driver_release(index: int) -> str:
    """The NVIDIA driver's release for device ``index`` as ``nvidia-smi`` says it; "unknown" when it cannot."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return UNKNOWN
    try:
        done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(index)],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines and lines[0].strip() else UNKNOWN


def gpu_count() -> int:
    """GPUs CUDA sees (``cudaGetDeviceCount``; 0 when it cannot tell); never raises."""
    try:
        cudart = cuda_runtime()
    except ImportError:
        return 0
    count = ask(cudart, "cudaGetDeviceCount")
    return int(count) if count else 0
