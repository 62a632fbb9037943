"""A hostile image through the whole stack: real podman, a generated spec, nvidia-cdi-hook at
createContainer. The image's library folder is a symlink to a host dir, and its environment carries
LD_PRELOAD and PYTHON* pointing at code that leaves a marker on the host if it ever runs there.
The container starts with its GPU; the host dir is untouched and no marker appears."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.e2e.rootfs import make_rootfs, rootfs_tar
from tests.e2e.test_cdi_generate_podman import LIBDIR, run, setup  # noqa: F401  (fixture)
from tests.support.hostile import marker_preload_library, marker_python_files
from tests.support.mountns import tree_listing

pytestmark = pytest.mark.e2e


def test_hostile_image_changes_and_runs_nothing_on_the_host(setup, tmp_path):  # noqa: F811
    podman, _ = setup
    host = tmp_path / "host"
    host.mkdir()
    (host / "victim").write_text("host file\n")
    markers = tmp_path / "markers"
    markers.mkdir()
    evil = tmp_path / "evil"
    evil.mkdir()
    marker_preload_library(evil, markers)
    marker_python_files(evil, markers, ("sitecustomize", "json", "os"))

    root = make_rootfs(tmp_path / "rootfs", glibc=True)
    lib = root / LIBDIR.lstrip("/")
    shutil.rmtree(lib)
    os.symlink(str(host), lib)                       # the library folder points at the host dir
    image = "localhost/gct-hostile:latest"
    podman("import", "--change", f"ENV LD_PRELOAD={evil}/preload.so", "--change", f"ENV PYTHONPATH={evil}",
           "--change", "ENV PYTHONINSPECT=1", str(rootfs_tar(root, tmp_path / "hostile.tar")), image)
    before = tree_listing(host)
    # the image really carries that environment (so the test can fail)
    shown = podman("run", "--rm", "--network", "none", image, "sh", "-c", 'echo "$LD_PRELOAD|$PYTHONPATH"').stdout
    assert shown.strip() == f"{evil}/preload.so|{evil}"

    lines = run(podman, "0", image=image)

    assert tree_listing(host) == before
    assert os.listdir(markers) == []
    # the container still got its GPU, with the links made inside its own root
    assert f"link {LIBDIR}/libcuda.so.1 -> libcuda.so.550.54.15" in lines
    assert "ldcache-ok" in lines
    assert len([line for line in lines if line.startswith("smi GPU")]) == 1
