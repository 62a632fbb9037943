"""A hostile image through the whole stack: real podman, a generated spec, nvidia-cdi-hook at
createContainer. The image's library folder is a symlink to a host dir, and its environment carries
LD_PRELOAD and PYTHON* pointing at code that leaves a marker on the host if it ever runs there.
The container starts with its GPU; the host dir is untouched and no marker appears."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from cdi.spec_file import load_spec_file
from tests.e2e.podman_env import installed_spec
from tests.e2e.rootfs import make_rootfs, rootfs_tar
from tests.e2e.test_cdi_generate_podman import LIBDIR, NVIDIA_CTK, PROBE, run, setup  # noqa: F401  (fixture)
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


def test_nvidias_older_spec_runs_its_hooks_through_nvidia_ctk_and_nothing_of_the_image(setup, tmp_path):  # noqa: F811
    """NVIDIA's older specs run `nvidia-ctk hook create-symlinks ...` and `nvidia-ctk hook update-ldcache ...`
    from hooks without `env`, which runc runs with the image's environment (docs/reference.md#hook-env). The installed
    nvidia-ctk runs them as nvidia-cdi-hook, in C: links and cache are made, no marker appears."""
    podman, _ = setup
    markers = tmp_path / "markers"
    markers.mkdir()
    evil = tmp_path / "evil"
    evil.mkdir()
    marker_preload_library(evil, markers)
    marker_python_files(evil, markers, ("sitecustomize", "ctk", "click", "json", "os"))
    image = "localhost/gct-hostile-ctk:latest"
    podman("import", "--change", f"ENV LD_PRELOAD={evil}/preload.so", "--change", f"ENV PYTHONPATH={evil}",
           "--change", f"ENV PYTHONHOME={evil}", str(rootfs_tar(make_rootfs(tmp_path / "rootfs", glibc=True),
                                                               tmp_path / "hostile.tar")), image)
    spec = load_spec_file(podman.generated_spec)
    (ours,) = spec.container_edits.hooks
    args = ours.args[1:]
    split = args.index("update-ldcache")
    entries = [["nvidia-ctk", "hook", *args[:split]], ["nvidia-ctk", "hook", *args[split:]],
               ["nvidia-ctk", "hook", "chmod", "--mode", "755", "--path", "/dev/dri"]]
    spec.kind = "upstream.example/gpu"
    document = spec.to_dict()   # hooks as NVIDIA wrote them: no env (our writer refuses that)
    document["containerEdits"]["hooks"] = [{"hookName": "createContainer", "path": NVIDIA_CTK, "args": a}
                                           for a in entries]
    with installed_spec(podman, document, ".json"):
        argv = podman.argv("run", "--rm", "--network", "none", "--device", "upstream.example/gpu=0", image,
                           "sh", "-c", PROBE)
        argv[argv.index("--runtime") + 1] = "runc"
        result = subprocess.run(argv, capture_output=True, text=True, env=podman.env, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"link {LIBDIR}/libcuda.so -> libcuda.so.1" in lines
    assert "ldcache-ok" in lines and len([line for line in lines if line.startswith("smi GPU")]) == 1
    assert os.listdir(markers) == []
