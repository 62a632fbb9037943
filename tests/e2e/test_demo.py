"""`make demo` is the README's first command: it must keep working as the product changes (a change of
what the CDI spec holds once broke it with nothing in the suite noticing)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"


def test_demo_runs_every_step_and_its_containers_see_their_gpus():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    ran = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=600,
                         stdin=subprocess.DEVNULL)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    shown = ran.stdout.split("\n==> ")
    containers = [part for part in shown if part.startswith("a container asking for")]
    assert len(containers) == 3
    gpu0, mig, every = (part.splitlines()[2:] for part in containers)
    assert len(gpu0) == 1 and gpu0[0].startswith("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-")
    assert len(mig) == 2 and mig[1].startswith("  MIG 1g.5gb      Device  0: (UUID: MIG-")
    assert [line.split(":")[0].strip() for line in every] == ["GPU 0", "GPU 1", "MIG 3g.20gb     Device  0",
                                                              "MIG 1g.5gb      Device  1"]
