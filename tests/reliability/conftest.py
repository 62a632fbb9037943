"""Fixtures of the reliability suite: the profile, the figures each test records, and the simulated
GPU host with the shim in front of runc (tests/e2e/shim_host.py, the same one the e2e tests use)."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.reliability import figures as figures_file
from tests.reliability.profile import current


@pytest.fixture(scope="session")
def profile():
    return current()


@pytest.fixture
def figures(request, profile):
    """A dict the test fills with what it measured; kept for the report (tests.reliability.figures)."""
    found: dict = {}
    yield found
    figures_file.append({"test": request.node.nodeid, "profile": profile.name, "figures": found})


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        entry = {"test": report.nodeid, "outcome": outcome}
        if report.when == "call":
            entry["seconds"] = round(report.duration, 1)
        figures_file.append(entry)


@pytest.fixture(scope="session")
def gpu_host(tmp_path_factory):
    """The simulated host of the shim's e2e tests (2 GPUs, MIG on GPU 1) with its CDI spec."""
    from tests.e2e.host_setup import ensure_hugetlb_on_v1
    from tests.e2e.shim_host import SHIM, build_gpu_host

    if os.geteuid() != 0:
        pytest.skip("needs root (device nodes, runc)")
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is not installed (make venv)")
    if shutil.which("runc") is None:
        pytest.skip("runc is not installed")
    ensure_hugetlb_on_v1()
    return build_gpu_host(tmp_path_factory.mktemp("reliability-host"))


@pytest.fixture(scope="session")
def template(gpu_host, tmp_path_factory):
    """A rootfs with glibc (nvidia-smi runs in it); each bundle gets a copy."""
    from tests.reliability.containers import template_rootfs

    return template_rootfs(tmp_path_factory.mktemp("template"))
