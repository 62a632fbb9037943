"""Podman for CDI e2e tests, on top of tests.e2e.engines.PrivatePodman (own storage, run root,
containers.conf through CONTAINERS_CONF, cgroupfs, file events; nothing under /etc is touched).

What CDI tests add: a busybox-static image imported without a registry, and a spec installed where
podman 4.3 looks for CDI specs. That podman has no `--cdi-spec-dir`, so a spec goes into /var/run/cdi
under a unique name and is removed afterwards (REFERENCE §5), as is /var/run/cdi if we created it.

Use the `cdi_podman` fixture: it yields a CdiPodman with `.podman` (call it like the podman CLI),
`.image` and `.install_spec(spec, suffix)` (a context manager).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from cdi.spec import Spec, write_spec
from tests.e2e.engines import PrivatePodman, busybox_image_tar, short_tempdir, start_podman, stop_podman
from tests.e2e.host_setup import ensure_hugetlb_on_v1

CDI_RUN_DIR = Path("/var/run/cdi")
IMAGE = "localhost/gct-busybox:latest"


def import_busybox_image(podman: PrivatePodman, name: str = IMAGE) -> str:
    tar = busybox_image_tar(podman.workdir)
    podman("import", str(tar), name)
    return name


@contextlib.contextmanager
def installed_spec(spec: Spec | dict, suffix: str = ".json") -> Iterator[Path]:
    """spec written (by our writer) to /var/run/cdi/gct-test-<random><suffix>, removed on exit. A dict
    is written as JSON as it is (another tool's spec, which our writer may refuse)."""
    created_dir = not CDI_RUN_DIR.exists()
    CDI_RUN_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    path = CDI_RUN_DIR / f"gct-test-{uuid.uuid4().hex}{suffix}"
    try:
        if isinstance(spec, dict):
            path.write_text(json.dumps(spec))
        else:
            write_spec(spec, path)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        if created_dir:
            with contextlib.suppress(OSError):
                CDI_RUN_DIR.rmdir()  # only if empty: never remove what others put there


@dataclass
class CdiPodman:
    podman: PrivatePodman
    image: str

    install_spec = staticmethod(installed_spec)

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """`podman run --rm --network none ARGS...`."""
        return self.podman("run", "--rm", "--network", "none", *args, check=check, timeout=timeout)


@pytest.fixture
def cdi_podman():
    if os.geteuid() != 0:
        pytest.skip("podman e2e needs root")
    for program in ("podman", "runc"):
        if subprocess.run(["sh", "-c", f"command -v {program}"], capture_output=True).returncode != 0:
            pytest.skip(f"not installed: {program}")
    ensure_hugetlb_on_v1()
    workdir = short_tempdir("gct-cdi-podman-")
    hooks = workdir / "hooks.d"
    hooks.mkdir()
    podman = start_podman(hooks, workdir=workdir)
    try:
        yield CdiPodman(podman, import_busybox_image(podman))
    finally:
        stop_podman(podman)
