"""Baseline: plain runc (and crun) lifecycles of a busybox container running `true`."""
from __future__ import annotations

import tempfile
from pathlib import Path

from bench.harness import Timings, report, time_lifecycles
from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1


def run(runs: int) -> str:
    ensure_hugetlb_on_v1()
    with tempfile.TemporaryDirectory(prefix="bench-runc-") as tmp:
        bundle = make_bundle(Path(tmp, "bundle"), ["true"])
        runc = time_lifecycles("runc lifecycle (create/start/wait/delete)", ["runc"], bundle, runs)
        crun = time_lifecycles("crun lifecycle (create/start/wait/delete)", ["crun"], bundle, runs)
        rows: list[Timings] = [runc, crun]
        return report("plain runtimes, busybox `true`", rows, runc)
