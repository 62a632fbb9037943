"""cdi.driver_files over a fake driver root of real ELF libraries and a real ld.so.cache."""
from __future__ import annotations

import logging
import os

import pytest

import cdi.ldcache as ldcache
from cdi.driver_files import (BINARY, COMMON, FIRMWARE, IPC_SOCKET, LIBRARY, LIBRARY32, MPS_DIR,
                              DriverFilesError, Symlink, locate_driver_files)

from .fake_driver_root import FW, LIB, LIB32, LIBRARIES_32, LIBRARIES_64, V, build_driver_root


@pytest.fixture
def root(tmp_path):
    return build_driver_root(str(tmp_path / "driver-root"))


def locate(root, caps, **kw):
    kw.setdefault("mps_pipe_directory", "/tmp/nvidia-mps")
    kw.setdefault("machine", "x86_64")
    return locate_driver_files(root, V, caps, **kw)


def summary(files):
    return {(f.kind, f.capability, f.container_path) for f in files.files}


def expected_libraries(cap, kind=LIBRARY):
    table, directory = (LIBRARIES_64, LIB) if kind == LIBRARY else (LIBRARIES_32, LIB32)
    return {(kind, c, f"{directory}/{name}") for name, _, c in table if c == cap}


FIRMWARE_FILES = {(FIRMWARE, COMMON, f"{FW}/gsp_ga10x.bin"), (FIRMWARE, COMMON, f"{FW}/gsp_tu10x.bin")}


def test_utility(root):
    assert summary(locate(root, ["utility"])) == expected_libraries("utility") | FIRMWARE_FILES | {
        (BINARY, "utility", "/usr/bin/nvidia-smi"),
        (BINARY, "utility", "/sbin/nvidia-persistenced"),
        (IPC_SOCKET, "utility", "/var/run/nvidia-persistenced/socket"),
    }


def test_compute(root):
    assert summary(locate(root, ["compute"])) == expected_libraries("compute") | FIRMWARE_FILES | {
        (BINARY, "compute", "/usr/bin/nvidia-cuda-mps-control"),
        (MPS_DIR, "compute", "/tmp/nvidia-mps"),
    }


def test_video_brings_compute_libraries_but_not_compute_binaries(root):
    assert summary(locate(root, ["video"])) == (expected_libraries("video")
                                               | expected_libraries("compute") | FIRMWARE_FILES)


@pytest.mark.parametrize("caps", [["graphics"], ["display"]])
def test_graphics_and_display(root, caps):
    assert summary(locate(root, caps)) == expected_libraries("graphics") | FIRMWARE_FILES


def test_ngx(root):
    assert summary(locate(root, ["ngx"])) == expected_libraries("ngx") | FIRMWARE_FILES


def test_compat32_adds_the_32bit_libraries_of_the_requested_capabilities(root):
    assert summary(locate(root, ["compat32"])) == FIRMWARE_FILES
    found = summary(locate(root, ["compat32", "compute", "graphics"]))
    assert {s for s in found if s[0] == LIBRARY32} == (expected_libraries("compute", LIBRARY32)
                                                      | expected_libraries("graphics", LIBRARY32))


def test_all(root):
    files = locate(root, "all")
    libs = {s for s in summary(files) if s[0] == LIBRARY}
    assert libs == {(LIBRARY, c, f"{LIB}/{n}") for n, _, c in LIBRARIES_64}
    assert len(files.of_kind(LIBRARY32)) == len(LIBRARIES_32)


def test_paths_sonames_and_symlinks(root):
    files = locate(root, ["compute", "graphics", "compat32"])
    by_path = {f.container_path: f for f in files.files}
    cuda = by_path[f"{LIB}/libcuda.so.{V}"]
    assert cuda.host_path == f"{root}{LIB}/libcuda.so.{V}"
    assert cuda.soname == "libcuda.so.1"
    assert cuda.symlinks == (Symlink(f"{LIB}/libcuda.so.1", f"libcuda.so.{V}"),
                             Symlink(f"{LIB}/libcuda.so", "libcuda.so.1"))
    glcore = by_path[f"{LIB}/libnvidia-glcore.so.{V}"]
    assert glcore.soname == f"libnvidia-glcore.so.{V}" and glcore.symlinks == ()
    glx32 = by_path[f"{LIB32}/libGLX_nvidia.so.{V}"]
    assert glx32.kind == LIBRARY32
    assert glx32.symlinks == (Symlink(f"{LIB32}/libGLX_nvidia.so.0", f"libGLX_nvidia.so.{V}"),
                              Symlink(f"{LIB32}/libGLX_indirect.so.0", f"libGLX_nvidia.so.{V}"))
    assert Symlink(f"{LIB}/libcuda.so", "libcuda.so.1") in files.symlinks
    for f in files.files:
        assert f.host_path == root + os.path.realpath(f.host_path)[len(os.path.realpath(root)):]


def test_the_links_nvidia_makes_beside_the_libraries(root):
    """libnvidia-ml.so, libnvidia-opticalflow.so (dlopen()ed by name), libGLX_indirect.so.0 (GLVND's
    indirect GLX) and, with graphics, gbm/nvidia-drm_gbm.so (Mesa's GBM backend), as NVIDIA's tool."""
    links = set(locate(root, ["utility", "video", "graphics"]).symlinks)
    assert {Symlink(f"{LIB}/libnvidia-ml.so", "libnvidia-ml.so.1"),
            Symlink(f"{LIB}/libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),
            Symlink(f"{LIB}/libGLX_indirect.so.0", f"libGLX_nvidia.so.{V}"),
            Symlink(f"{LIB}/gbm/nvidia-drm_gbm.so", "../libnvidia-allocator.so.1"),
            Symlink(f"{LIB}/libcuda.so", "libcuda.so.1")} <= links
    # the 32-bit GLX library gets its own indirect link
    assert Symlink(f"{LIB32}/libGLX_indirect.so.0", f"libGLX_nvidia.so.{V}") in \
        set(locate(root, ["graphics", "compat32"]).symlinks)
    # a compute-only container gets the allocator, but no GBM backend link
    compute = set(locate(root, ["compute"]).symlinks)
    assert Symlink(f"{LIB}/libnvidia-allocator.so.1", f"libnvidia-allocator.so.{V}") in compute
    assert not any(link.path.endswith("nvidia-drm_gbm.so") for link in compute)


def test_ipc_socket_host_path_is_inside_the_root(root):
    (sock,) = locate(root, ["utility"]).of_kind(IPC_SOCKET)
    assert sock.host_path == f"{root}/run/nvidia-persistenced/socket"
    assert sock.container_path == "/var/run/nvidia-persistenced/socket"


def test_without_a_cache_the_library_directories_are_scanned(tmp_path):
    with_cache = build_driver_root(str(tmp_path / "a"))
    without = build_driver_root(str(tmp_path / "b"), with_cache=False)
    assert not os.path.exists(f"{without}/etc/ld.so.cache")
    a = locate(with_cache, "all")
    b = locate(without, "all")
    assert {(f.kind, f.container_path, f.soname) for f in a.libraries} == \
        {(f.kind, f.container_path, f.soname) for f in b.libraries}
    # Without ldconfig there are no soname links in the root, but the container still gets them.
    cuda = next(f for f in b.libraries if f.container_path == f"{LIB}/libcuda.so.{V}")
    assert Symlink(f"{LIB}/libcuda.so.1", f"libcuda.so.{V}") in cuda.symlinks


def test_the_cache_is_parsed_once_for_all_capabilities(root, monkeypatch):
    calls = []
    real = ldcache.parse_ld_cache   # imported by the search when it reads the cache
    monkeypatch.setattr(ldcache, "parse_ld_cache",
                        lambda *a: calls.append(a[1]) or real(*a))
    locate(root, "all")
    assert calls == [f"{root}/etc/ld.so.cache"]


def test_binary_search_path(root):
    os.makedirs(f"{root}/opt/nv/bin")
    os.rename(f"{root}/usr/bin/nvidia-smi", f"{root}/opt/nv/bin/nvidia-smi")
    assert {f.container_path for f in locate(root, ["utility"]).of_kind(BINARY)} == {
        "/sbin/nvidia-persistenced"}
    found = locate(root, ["utility"], search_path="relative/ignored:/opt/nv/bin:/sbin")
    assert {f.container_path for f in found.of_kind(BINARY)} == {
        "/opt/nv/bin/nvidia-smi", "/sbin/nvidia-persistenced"}


def test_mps_pipe_directory_from_environment(root, monkeypatch):
    os.makedirs(f"{root}/srv/mps")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/srv/mps")
    (mps,) = locate_driver_files(root, V, ["compute"], machine="x86_64").of_kind(MPS_DIR)
    assert (mps.container_path, mps.host_path) == ("/srv/mps", f"{root}/srv/mps")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    (mps,) = locate_driver_files(root, V, ["compute"], machine="x86_64").of_kind(MPS_DIR)
    assert mps.container_path == "/tmp/nvidia-mps"


def test_missing_files_are_debug_messages_not_errors(tmp_path, caplog):
    empty = tmp_path / "empty"
    empty.mkdir()
    with caplog.at_level(logging.DEBUG, logger="cdi.driver_files"):
        files = locate(str(empty), "all")
    assert files.files == ()
    assert caplog.records and all(r.levelno == logging.DEBUG for r in caplog.records)
    assert any("nvidia-smi" in r.getMessage() for r in caplog.records)


def test_other_driver_version_finds_nothing(root):
    files = locate_driver_files(root, "535.1.1", "all", machine="x86_64",
                                mps_pipe_directory="/none")
    assert files.libraries == () and files.of_kind(FIRMWARE) == ()


@pytest.mark.parametrize("kwargs,message", [
    (dict(driver_version=""), "invalid driver version ''"),
    (dict(driver_version="../550"), "invalid driver version"),
    (dict(capabilities=["compute", "gpu"]), "unknown driver capability 'gpu'"),
    (dict(machine="sparc"), "unsupported machine 'sparc'"),
])
def test_bad_arguments(root, kwargs, message):
    args = dict(root=root, driver_version=V, capabilities=["compute"], machine="x86_64")
    args.update(kwargs)
    with pytest.raises(DriverFilesError, match=message):
        locate_driver_files(**args)


def test_bad_root(tmp_path):
    with pytest.raises(DriverFilesError, match="cannot use driver root: No such file"):
        locate(str(tmp_path / "missing"), ["compute"])


def test_corrupt_cache_is_a_clear_error(root):
    with open(f"{root}/etc/ld.so.cache", "r+b") as f:
        f.truncate(60)
    with pytest.raises(DriverFilesError, match=f"^truncated.*\\({root}/etc/ld.so.cache\\)$"):
        locate(root, ["compute"])


def test_capabilities_as_a_comma_string(root):
    assert summary(locate(root, " utility, compute ")) == \
        summary(locate(root, ["utility", "compute"]))


def test_other_machine_takes_no_x86_libraries(root):
    files = locate(root, "all", machine="aarch64")
    assert files.libraries == ()          # cache arch and ELF machine both say x86-64
    assert files.of_kind(BINARY)          # binaries and the rest do not depend on the ABI


def test_ld_cache_path_is_taken_inside_the_root(root):
    os.rename(f"{root}/etc/ld.so.cache", f"{root}/etc/other.cache")
    with open(f"{root}/etc/ld.so.cache", "wb") as f:
        f.write(b"garbage that would fail to parse")
    with pytest.raises(DriverFilesError):
        locate(root, ["compute"])
    files = locate(root, ["compute"], ld_cache="/etc/other.cache")
    assert {f.container_path for f in files.libraries} == {
        p for _, _, p in expected_libraries("compute")}


@pytest.mark.parametrize("with_cache", [True, False], ids=["ld-cache", "no-ld-cache"])
def test_library_search_paths_find_what_the_cache_does_not_list(tmp_path, with_cache):
    """`cdi generate --library-search-path` (NVIDIA's flag): folders inside the root searched for the
    driver libraries the root's ld.so.cache (or the usual folders) does not give; a library found
    there too is taken from the cache only."""
    from cdi.driver_root import DriverRoot

    root = build_driver_root(str(tmp_path / "r"), with_cache=with_cache)
    os.makedirs(f"{root}/opt/nv/lib")
    os.rename(f"{root}{LIB}/libnvidia-encode.so.{V}", f"{root}/opt/nv/lib/libnvidia-encode.so.{V}")
    os.link(f"{root}{LIB}/libcuda.so.{V}", f"{root}/opt/nv/lib/libcuda.so.{V}")

    def video(**kw):
        return {f.container_path for f in locate(DriverRoot(root, **kw), ["video"]).libraries
                if "encode" in f.container_path or "libcuda.so" in f.container_path}

    assert video() == {f"{LIB}/libcuda.so.{V}"}
    assert video(library_search_paths=("/opt/nv/lib", "/missing")) == {
        f"{LIB}/libcuda.so.{V}", f"/opt/nv/lib/libnvidia-encode.so.{V}"}


def test_nvml_is_found_in_a_library_search_path(tmp_path):
    from cdi.driver_root import DriverRoot
    from cdi.nvml import find_nvml_library

    root = build_driver_root(str(tmp_path / "r"))
    os.makedirs(f"{root}/opt/nv/lib")
    for name in os.listdir(f"{root}{LIB}"):
        if name.startswith("libnvidia-ml.so"):
            os.rename(f"{root}{LIB}/{name}", f"{root}/opt/nv/lib/{name}")
    assert find_nvml_library(DriverRoot(root)) is None
    assert find_nvml_library(DriverRoot(root, library_search_paths=("/opt/nv/lib",))) == \
        f"{root}/opt/nv/lib/libnvidia-ml.so.{V}"
