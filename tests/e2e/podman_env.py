"""Podman for CDI e2e tests, on top of tests.e2e.engines.PrivatePodman (own storage, run root,
containers.conf through CONTAINERS_CONF, cgroupfs, file events; nothing under /etc is touched).

What CDI tests add: a busybox-static image imported without a registry, and a spec installed where
podman 4.3 looks for CDI specs. That podman has no `--cdi-spec-dir` (docs/reference.md#test-hosts) and reads
/etc/cdi and /var/run/cdi: in its own mount namespace those are dirs of its own
(PrivatePodman.cdi_spec_dir is its /run/cdi), so a spec never goes to the machine's /run/cdi and two
test runs never see each other's specs.

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

from cdi.spec import Spec
from cdi.spec_file import write_spec
from tests.e2e.engines import PrivatePodman, busybox_image_tar, short_tempdir, start_podman, stop_podman
from tests.e2e.host_setup import ensure_hugetlb_on_v1

IMAGE = "localhost/gct-busybox:latest"


def import_busybox_image(podman: PrivatePodman, name: str = IMAGE) -> str:
    tar = busybox_image_tar(podman.workdir)
    podman("import", str(tar), name)
    return name


@contextlib.contextmanager
def installed_spec(podman: PrivatePodman, spec: Spec | dict, suffix: str = ".json") -> Iterator[Path]:
    """spec written (by our writer) to podman's /run/cdi as gct-test-<random><suffix>, removed on exit.
    A dict is written as JSON as it is (another tool's spec, which our writer may refuse)."""
    path = podman.cdi_spec_dir / f"gct-test-{uuid.uuid4().hex}{suffix}"
    try:
        if isinstance(spec, dict):
            path.write_text(json.dumps(spec))
        else:
            write_spec(spec, path)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@dataclass
class CdiPodman:
    podman: PrivatePodman
    image: str

    def install_spec(self, spec: Spec | dict, suffix: str = ".json"):
        """installed_spec into this podman's spec dir (a context manager)."""
        return installed_spec(self.podman, spec, suffix)

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
