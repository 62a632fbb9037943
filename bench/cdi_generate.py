"""`nvidia-ctk cdi generate` for a simulated host of 8 GPUs x 7 MIG devices (goal: median < 250 ms for the
whole command), next to the floors it cannot beat: a bare interpreter and `nvidia-ctk --version`."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench.harness import report, time_command, time_lifecycles
from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1

GPUS, MIGS_PER_GPU = 8, 7
GOAL_MS = 250


def run(runs: int) -> str:
    bin_dir = Path(sys.executable).parent
    ctk = str(bin_dir / "nvidia-ctk")
    with tempfile.TemporaryDirectory(prefix="bench-cdigen-") as tmp:
        host = Path(tmp, "host")
        mig = ",".join(["1g.5gb"] * MIGS_PER_GPU)
        time_command("(setup) simulate create", [ctk, "simulate", "create", str(host), "--gpus", str(GPUS),
                                                 *[f"--mig={i}={mig}" for i in range(GPUS)]], 0)
        out = str(Path(tmp, "nvidia.yaml"))
        ensure_hugetlb_on_v1()
        runc = time_lifecycles("runc lifecycle (baseline)", ["runc"], make_bundle(Path(tmp, "bundle"), ["true"]), runs)
        rows = [
            runc,
            time_command("python -I -c pass (floor)", [sys.executable, "-I", "-c", "pass"], runs),
            time_command("nvidia-ctk --version (click floor)", [ctk, "--version"], runs),
            time_command(f"cdi generate {GPUS} GPUs x {MIGS_PER_GPU} MIG, yaml file",
                         [ctk, "cdi", "generate", "--driver-root", str(host), "--output", out], runs),
            time_command(f"cdi generate {GPUS} GPUs x {MIGS_PER_GPU} MIG, json stdout",
                         [ctk, "cdi", "generate", "--driver-root", str(host), "--format", "json"], runs),
        ]
        text = report(f"nvidia-ctk cdi generate (goal: median < {GOAL_MS} ms)", rows, runc)
        verdict = "met" if rows[3].median_ms < GOAL_MS else "NOT met"
        return f"{text}\ngoal {verdict}: {rows[3].median_ms:.1f} ms for the YAML spec"
