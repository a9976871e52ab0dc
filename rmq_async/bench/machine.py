"""Process and machine facts for the benchmark harness: RSS, percentiles, versions, parent death.

Strategy: everything here is synchronous and cheap. Memory comes from ``/proc/self/status`` (VmRSS,
VmHWM) on Linux and from ``resource.getrusage`` elsewhere; percentiles are nearest-rank on a sorted
copy; ``die_with_parent`` makes an exec'd child (broker, worker, pacer, extra member) end when the
harness ends, even when the harness is killed with SIGKILL (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import platform
import signal
import statistics
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = [
    "die_with_parent",
    "machine_info",
    "peak_rss_mb",
    "percentile",
    "rss_mb",
    "spread",
]

_PACKAGES = ("rmq_async", "anyio", "uvloop", "pydantic", "sortedcontainers", "rich", "matplotlib")


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float | None:
    """Resident set size of this process in MiB (None where unknown)."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib / 1024


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (VmHWM, or ru_maxrss)."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib / 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def percentile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..1) of ``xs``; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(q * len(s))))]


def spread(xs: Sequence[float | None]) -> dict[str, float | None]:
    """Median, min and max of the values that are not None."""
    vals = [x for x in xs if x is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def _version(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """Cores, CPU model, OS, Python and package versions, for the result file."""
    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": {p: _version(p) for p in _PACKAGES},
        "loadavg_at_start": load,
    }


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux; a no-op elsewhere).

    Called first thing in an exec'd child. ``parent_pid`` closes the race where the parent died
    before the call: then this process exits at once.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - exotic libc
            pass
    if parent_pid is not None and os.getppid() != parent_pid:
        raise SystemExit(3)
