"""Baseline: plain runc (and crun) lifecycles of a busybox container running `true`, the two rows
round-robin (bench.harness.time_rounds); paired: the median of each round's crun/runc ratio."""
from __future__ import annotations

import tempfile
from pathlib import Path

from bench.harness import lifecycle_row, report, time_rounds
from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1


def run(runs: int) -> str:
    ensure_hugetlb_on_v1()
    with tempfile.TemporaryDirectory(prefix="bench-runc-") as tmp:
        bundle, state = make_bundle(Path(tmp, "bundle"), ["true"]), Path(tmp, "state")
        runc, crun = time_rounds([
            lifecycle_row("runc lifecycle (create/start/wait/delete)", ["runc"], bundle, state),
            lifecycle_row("crun lifecycle (create/start/wait/delete)", ["crun"], bundle, state)], runs)
        return report("plain runtimes, busybox `true`", [runc, crun], runc, with_paired=True)
