"""Benchmark helpers: run a CLI module as a measured subprocess, and this process's CPU time and peak memory."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time


def run_module(*args: str, threads: int = 2) -> tuple[float, str]:
    """``python -m *args`` with ``threads`` OpenMP threads; (wall seconds, its stdout). Stops the benchmark with the
    end of its stderr if it fails."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    if result.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started, result.stdout


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (Beam's multi_processing workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
