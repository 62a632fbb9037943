"""Timing OCI container lifecycles: create, start, wait, delete, each call through a given runtime.

The benchmark process is a child subreaper (like containerd-shim), so it can wait for the container's
init process itself after `start` without polling `runtime state`.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path



def set_child_subreaper() -> None:
    """prctl(PR_SET_CHILD_SUBREAPER, 1): orphaned container processes are reparented to us."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER (linux/prctl.h)
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@dataclass
class Timings:
    label: str
    samples: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000

    def line(self, baseline: "Timings | None" = None) -> str:
        text = (f"{self.label:<44} median {self.median_ms:8.1f} ms  "
                f"(min {min(self.samples) * 1000:6.1f}, max {max(self.samples) * 1000:6.1f}, n={len(self.samples)})")
        if baseline is not None and baseline is not self:
            text += f"  ratio {self.median_ms / baseline.median_ms:5.2f}x vs {baseline.label}"
        return text


def _run(cmd: list[str], env: dict | None = None) -> None:
    # Never pipes: the container's init inherits create's stdio, so reading a pipe to EOF would wait
    # for the container to exit, which needs `start`.
    with tempfile.TemporaryFile() as err:
        result = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        if result.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {err.read().decode().strip()}")


def lifecycle(runtime: list[str], bundle: Path, state_root: Path, env: dict | None = None) -> float:
    """One create/start/wait/delete of the bundle through `runtime`; returns seconds."""
    cid = "bench-" + uuid.uuid4().hex[:12]
    pid_file = bundle / f"{cid}.pid"
    base = [*runtime, "--root", str(state_root)]
    start = time.perf_counter()
    _run([*base, "create", "--bundle", str(bundle), "--pid-file", str(pid_file), cid], env)
    pid = int(pid_file.read_text())
    _run([*base, "start", cid], env)
    os.waitpid(pid, 0)
    _run([*base, "delete", cid], env)
    elapsed = time.perf_counter() - start
    pid_file.unlink(missing_ok=True)
    return elapsed


def time_lifecycles(label: str, runtime: list[str], bundle: Path, runs: int, env: dict | None = None,
                    restore_config: bytes | None = None) -> Timings:
    """Median over `runs` lifecycles after one warm-up; restores config.json before each run when given
    (a shim rewrites it on create)."""
    set_child_subreaper()
    timings = Timings(label)
    with tempfile.TemporaryDirectory(prefix="bench-state-") as state_root:
        for i in range(runs + 1):
            if restore_config is not None:
                (bundle / "config.json").write_bytes(restore_config)
            elapsed = lifecycle(runtime, bundle, Path(state_root), env)
            if i:  # the first run warms caches
                timings.samples.append(elapsed)
    return timings


def time_command(label: str, cmd: list[str], runs: int, env: dict | None = None) -> Timings:
    timings = Timings(label)
    for i in range(runs + 1):
        start = time.perf_counter()
        _run(cmd, env)
        if i:
            timings.samples.append(time.perf_counter() - start)
    return timings


def report(title: str, rows: list[Timings], baseline: Timings) -> str:
    lines = [f"== {title}"] + [row.line(baseline) for row in rows]
    return "\n".join(lines)


def read_config(bundle: Path) -> dict:
    return json.loads((bundle / "config.json").read_text())
