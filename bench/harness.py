"""Timing OCI container lifecycles: create, start, wait, delete, each call through a given runtime.

The benchmark process is a child subreaper (like containerd-shim), so it can wait for the container's
init process itself after `start` without polling `runtime state`.
"""
from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cdi.config_cache import RECENT_NS


@functools.cache
def set_child_subreaper() -> None:
    """prctl(PR_SET_CHILD_SUBREAPER, 1), once per process: orphaned container processes are reparented to us."""
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
        text = (f"{self.label:<{max(44, len(self.label))}} median {self.median_ms:8.1f} ms  "
                f"(min {min(self.samples) * 1000:6.1f}, max {max(self.samples) * 1000:6.1f}, n={len(self.samples)})")
        if baseline is not None and baseline is not self:
            text += f"  ratio {self.median_ms / baseline.median_ms:5.2f}x vs {baseline.label}"
        return text


def load_line(when: str) -> str:
    """The machine's load average, printed with each run: the ratios move with it (a shared machine)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {when}: {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} cores)"


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
    set_child_subreaper()
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


def run_timed(cmd: list[str], env: dict | None = None) -> float:
    """One run of cmd; returns seconds."""
    start = time.perf_counter()
    _run(cmd, env)
    return time.perf_counter() - start


def time_rounds(rows: list[tuple[str, Callable[[], float]]], runs: int) -> list[Timings]:
    """Each row (a label and a function timing one run of it, in seconds) once per round, `runs` rounds
    after a warm-up round that is not counted; each round starts one row later than the one before, so
    that the machine's drift and a burst of load from elsewhere hit every row alike."""
    timings = [Timings(label) for label, _ in rows]
    for i in range(runs + 1):
        first = i % len(rows)
        for k in [*range(first, len(rows)), *range(first)]:
            seconds = rows[k][1]()
            if i:
                timings[k].samples.append(seconds)
    return timings


def wait_until_settled(newest_ns: int) -> None:
    """Sleep until cdi.config_cache.RECENT_NS has passed since newest_ns (time.time_ns() or an st_ctime_ns
    when the bench's host was made): the caches keep nothing changed more recently than that (a racing
    edit could go unseen), and the benchmarks measure a host whose files are older than a few seconds."""
    time.sleep(max(0.0, (newest_ns + RECENT_NS - time.time_ns()) / 1e9) + 0.05)


def lifecycle_row(label: str, runtime: list[str], bundle: Path, state_root: Path, env: dict | None = None,
                  config: bytes | None = None) -> tuple[str, Callable[[], float]]:
    """A row for time_rounds: one lifecycle of bundle through runtime, config.json first rewritten with
    config when given (a shim edits it on create, and rows may share a bundle)."""

    def once() -> float:
        if config is not None:
            (bundle / "config.json").write_bytes(config)
        return lifecycle(runtime, bundle, state_root, env)

    return label, once


def paired(row: Timings, baseline: Timings) -> str:
    """The median of each round's ratio to that round's baseline (rows taken by time_rounds): a load
    burst hits the rows of one round alike, so this drifts less than the ratio of the medians."""
    if row is baseline:
        return ""
    return f", paired {statistics.median(r / b for r, b in zip(row.samples, baseline.samples)):5.2f}x"


def report(title: str, rows: list[Timings], baseline: Timings, with_paired: bool = False) -> str:
    lines = [f"== {title}"] + [row.line(baseline) + (paired(row, baseline) if with_paired else "") for row in rows]
    return "\n".join(lines)


def read_config(bundle: Path) -> dict:
    return json.loads((bundle / "config.json").read_text())
