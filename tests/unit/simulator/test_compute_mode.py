"""A GPU's compute mode on the simulated host: set by the simulated nvidia-smi (`-i ID -c MODE`) or by
nvmlDeviceSetComputeMode through nvidia-ml-py, and seen by every other process (nvidia-ml-py, `nvidia-smi
-q`, `--query-gpu=compute_mode`, the summary table), since it lives in the host's state directory."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.simulated_host import create_in_process, marker_inventory

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("gcc") is None,
                                reason="a simulated host needs root (mknod) and gcc")

REPO = Path(__file__).resolve().parents[3]
LIB = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


@pytest.fixture
def host(tmp_path) -> Path:
    root = tmp_path / "host"
    create_in_process(root, gpus=2, mig_options=("1=1g.5gb",))
    return root


def smi(root: Path, *args: str, capabilities: bool = True) -> subprocess.CompletedProcess:
    argv = [str(root / "usr/bin/nvidia-smi"), *args]
    if not capabilities:    # root without CAP_DAC_OVERRIDE: bound by the permission bits, as a user is
        argv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def pynvml(root: Path, code: str) -> str:
    """Run `code` with nvidia-ml-py bound to the host's library (n = pynvml, h = GPU handles)."""
    prelude = textwrap.dedent("""
        import ctypes, sys
        ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
        import pynvml as n
        n.nvmlInit()
        h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    """)
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code), str(root / LIB)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


def modes_by_smi(root: Path) -> list[str]:
    done = smi(root, "--query-gpu=compute_mode", "--format=csv,noheader")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_nvidia_smi_sets_and_every_process_sees_it(host):
    assert modes_by_smi(host) == ["Default", "Default"]
    assert pynvml(host, "print([n.nvmlDeviceGetComputeMode(x) for x in h])") == "[0, 0]\n"
    uuid1 = marker_inventory(host)["gpus"][1]["uuid"]

    done = smi(host, "-i", "0", "-c", "EXCLUSIVE_PROCESS")
    assert done.returncode == 0 and done.stdout.startswith("Set compute mode to EXCLUSIVE_PROCESS for GPU ")
    assert smi(host, "-i", uuid1, "-c", "2").returncode == 0                   # a UUID, a mode's number
    assert modes_by_smi(host) == ["Exclusive_Process", "Prohibited"]
    assert pynvml(host, "print([n.nvmlDeviceGetComputeMode(x) for x in h])") == \
        f"[{3}, {2}]\n"                # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, NVML_COMPUTEMODE_PROHIBITED
    report = smi(host, "-q").stdout
    assert [line.split(":")[1].strip() for line in report.splitlines() if "Compute Mode" in line] == \
        ["Exclusive_Process", "Prohibited"]
    assert "E. Process" in smi(host).stdout

    assert smi(host, "-c", "DEFAULT").returncode == 0                           # no -i: every GPU
    assert modes_by_smi(host) == ["Default", "Default"]


def test_nvml_sets_and_nvidia_smi_sees_it(host):
    pynvml(host, "n.nvmlDeviceSetComputeMode(h[1], n.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)")
    assert modes_by_smi(host) == ["Default", "Exclusive_Process"]
    # A MIG device answers with its GPU's mode and cannot set one; an unknown mode is refused.
    out = pynvml(host, """
        mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h[1], 0)
        print(n.nvmlDeviceGetComputeMode(mig) == n.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        for handle, mode in ((mig, 0), (h[0], 1), (h[0], 7)):
            try:
                n.nvmlDeviceSetComputeMode(handle, mode)
            except n.NVMLError as e:
                print(e.value)
    """)
    assert out.split() == ["True", "3", "2", "2"]   # NOT_SUPPORTED, then INVALID_ARGUMENT twice
    pynvml(host, "n.nvmlDeviceSetComputeMode(h[1], n.NVML_COMPUTEMODE_DEFAULT)")
    assert modes_by_smi(host) == ["Default", "Default"]


def test_nvidia_smi_errors(host):
    (host / "run/nvidia-simulated-host/compute_mode").chmod(0o555)   # not writable: as a user on a real host
    refused = smi(host, "-i", "0", "-c", "3", capabilities=False)
    assert refused.returncode == 4 and "Insufficient Permissions" in refused.stdout, refused
    bad = smi(host, "-i", "0", "-c", "EXCLUSIVE_THREAD")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Invalid compute mode" in bad.stderr
    missing = smi(host, "-i", "9", "-c", "0")
    assert missing.returncode == 6 and missing.stdout == "No devices were found\n"
    assert modes_by_smi(host) == ["Default", "Default"]
