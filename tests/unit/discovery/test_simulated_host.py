"""The locator over a simulated GPU host (simulator/): a real consumer of a real-looking driver
root, checked against the simulator's own list of what it installs."""
from __future__ import annotations

import os

import pytest

from cdi.driver_files import (BINARY, COMMON, FIRMWARE, IPC_SOCKET, LIBRARY, LIBRARY32,
                              locate_driver_files)
from simulator import driver_files as simulated
from simulator.host_builder import create_simulated_host
from simulator.models import DEFAULT_MODEL

V = "550.54.15"
CAPS = ("utility", "compute", "video", "graphics", "ngx")
SIM_BINARY_CAPABILITY = {"nvidia-smi": "utility", "nvidia-debugdump": "utility",
                         "nvidia-persistenced": "utility", "nvidia-cuda-mps-control": "compute",
                         "nvidia-cuda-mps-server": "compute"}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a simulated host has device nodes made with mknod: needs root")
    root = str(tmp_path_factory.mktemp("sim") / "host")
    create_simulated_host(root, gpus=2, model=DEFAULT_MODEL, driver_version=V, cuda_version="12.4")
    return root


def locate(root, caps):
    return locate_driver_files(root, V, caps, machine="x86_64", mps_pipe_directory="/tmp/nvidia-mps")


def expected_libraries(caps, root):
    lib64 = "/" + simulated.LIB64_DIR
    lib32 = "/" + simulated.LIB32_DIR
    has_32bit = os.path.isdir(root + lib32)
    out = set()
    for lib in simulated.LIBRARIES:
        if lib.capability in caps:
            out.add((LIBRARY, lib.capability, f"{lib64}/{lib.file_name(V)}", lib.soname(V)))
            if "compat32" in caps and lib.has_32bit and has_32bit:
                out.add((LIBRARY32, lib.capability, f"{lib32}/{lib.file_name(V)}",
                         lib.soname(V)))
    return out


def libraries(files):
    return {(f.kind, f.capability, f.container_path, f.soname) for f in files.libraries}


@pytest.mark.parametrize("cap", CAPS)
def test_each_capability_gets_exactly_its_libraries_and_binaries(host, cap):
    files = locate(host, [cap])
    implied = {"video": {"video", "compute"}}.get(cap, {cap})
    assert libraries(files) == expected_libraries(implied, host)
    assert {(f.capability, os.path.basename(f.container_path)) for f in files.of_kind(BINARY)} == \
        {(c, name) for name, c in SIM_BINARY_CAPABILITY.items() if c == cap}


def test_everything(host):
    files = locate(host, "all")
    assert libraries(files) == expected_libraries(set(CAPS) | {"compat32"}, host)
    assert {f.container_path for f in files.of_kind(FIRMWARE)} == {
        f"/lib/firmware/nvidia/{V}/{name}" for name in simulated.GSP_FIRMWARE}
    assert all(f.capability == COMMON for f in files.of_kind(FIRMWARE))
    (socket,) = files.of_kind(IPC_SOCKET)
    assert socket.container_path == "/var/run/nvidia-persistenced/socket"
    assert socket.host_path == f"{host}/run/nvidia-persistenced/socket"
    real_root = os.path.realpath(host)
    for f in files.files:
        assert os.path.realpath(f.host_path) == f.host_path.replace(host, real_root, 1)
        assert f.host_path.startswith(host + "/")


def test_library_links_match_the_hosts_own_links(host):
    # The simulator made SONAME links the way the driver installer does; the container gets
    # the same ones (plus libcuda.so) from the locator.
    files = locate(host, ["compute", "utility"])
    for f in files.libraries:
        for link in f.symlinks:
            host_link = host + link.path
            assert os.readlink(host_link) == link.target, link
    cuda = next(f for f in files.libraries if f.soname == "libcuda.so.1")
    assert [os.path.basename(s.path) for s in cuda.symlinks] == ["libcuda.so.1", "libcuda.so"]


def test_the_simulated_nvml_is_found_for_utility(host):
    (ml,) = [f for f in locate(host, ["utility"]).libraries if f.soname == "libnvidia-ml.so.1"]
    assert ml.host_path == f"{host}/{simulated.LIB64_DIR}/libnvidia-ml.so.{V}"
