"""`nvidia-ctk cdi generate` for simulated hosts of 2 GPUs (issue 15's case) and of 8 GPUs x 7 MIG devices
(goal: median < 250 ms for the whole command), next to the floors it cannot beat: a static binary's start
(the launcher running nvidia-cdi-hook --version, as NVIDIA's Go nvidia-ctk starts) and a bare interpreter
as our launcher runs it (python -I -S); and, for scale, that interpreter importing click, which every
nvidia-ctk command but a plain `cdi generate` pays (ctk.fast_path).

The rows, runc's lifecycle (the baseline of the ratios) among them, are timed in rounds
(bench.harness.time_rounds), each round running every row once and starting one row later than the
round before, so that a burst of load from elsewhere hits all rows alike; the medians are over the
rounds."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import tempfile
from functools import partial
from pathlib import Path

from bench.harness import lifecycle_row, report, run_timed, time_rounds
from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1

GPUS, MIGS_PER_GPU = 8, 7
GOAL_MS = 250


def run(runs: int) -> str:
    bin_dir = Path(sys.executable).parent
    ctk = str(bin_dir / "nvidia-ctk")
    site = sysconfig.get_paths()["purelib"]
    with tempfile.TemporaryDirectory(prefix="bench-cdigen-") as tmp:
        small, big = Path(tmp, "host2"), Path(tmp, "host8")
        mig = ",".join(["1g.5gb"] * MIGS_PER_GPU)
        subprocess.run([ctk, "simulate", "create", str(small), "--gpus", "2"], check=True, capture_output=True)
        subprocess.run([ctk, "simulate", "create", str(big), "--gpus", str(GPUS),
                        *[f"--mig={i}={mig}" for i in range(GPUS)]], check=True, capture_output=True)
        ensure_hugetlb_on_v1()
        runc_row = lifecycle_row("runc lifecycle (baseline)", ["runc"], make_bundle(Path(tmp, "bundle"), ["true"]),
                                 Path(tmp, "state"))
        # keyed, so that the summary below compares the rows it names whatever rows come and go
        commands = {
            "static floor": ("static binary start (floor)", [str(bin_dir / "nvidia-cdi-hook"), "--version"]),
            "python floor": ("python -I -S -c pass (floor)", [sys.executable, "-I", "-S", "-c", "pass"]),
            "click": ("python -I -S: import click (other commands)",
                      [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {site!r}); import click"]),
            "2 GPUs yaml": ("cdi generate 2 GPUs, yaml file",
                            [ctk, "cdi", "generate", "--driver-root", str(small),
                             "--output", str(Path(tmp, "two.yaml"))]),
            "MIG yaml": (f"cdi generate {GPUS} GPUs x {MIGS_PER_GPU} MIG, yaml file",
                         [ctk, "cdi", "generate", "--driver-root", str(big),
                          "--output", str(Path(tmp, "nvidia.yaml"))]),
            "MIG json": (f"cdi generate {GPUS} GPUs x {MIGS_PER_GPU} MIG, json stdout",
                         [ctk, "cdi", "generate", "--driver-root", str(big), "--format", "json"]),
        }
        runc, *rows = time_rounds([runc_row, *[(label, partial(run_timed, cmd)) for label, cmd in commands.values()]],
                                  runs)
        text = report(f"nvidia-ctk cdi generate (goal: median < {GOAL_MS} ms for {GPUS} x {MIGS_PER_GPU} MIG)",
                      [runc, *rows], runc)
        timed = dict(zip(commands, rows))   # time_rounds keeps the rows' order
        floor, two, eight = (timed[key].median_ms for key in ("python floor", "2 GPUs yaml", "MIG yaml"))
        verdict = "met" if eight < GOAL_MS else "NOT met"
        return (f"{text}\ngoal {verdict}: {eight:.1f} ms for the {GPUS}-GPU YAML spec; 2 GPUs: {two:.1f} ms, "
                f"{two - floor:.1f} ms above the interpreter's start")
