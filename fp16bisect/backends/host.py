"""The machine this process runs on, as an override file's ``environment`` records it: Python, CPU, OS.

Every value is a string and ``UNKNOWN`` when it cannot be told; nothing here raises. The CPU's name is the
``model name`` line of ``/proc/cpuinfo`` (Linux), else ``platform.processor()``.
"""

from __future__ import annotations

import platform
from pathlib import Path

UNKNOWN = "unknown"
CPUINFO = Path("/proc/cpuinfo")


def cpu_name(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``), else ``platform.processor()``."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor().strip() or UNKNOWN


def os_name() -> str:
    """The operating system and its release, e.g. ``Linux 6.8.0-45-generic``."""
    name = f"{platform.system()} {platform.release()}".strip()
    return name or UNKNOWN


def host() -> dict[str, str]:
    """Python's version, the CPU's name, the machine's architecture and the OS."""
    return {"python": platform.python_version(), "cpu": cpu_name(), "machine": platform.machine() or UNKNOWN,
            "os": os_name()}
