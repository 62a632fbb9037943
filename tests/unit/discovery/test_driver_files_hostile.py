"""Hostile driver roots: whatever links and cache entries a root holds, nothing outside it is
ever returned. `outside` plays the host: a complete driver installation next to the root, which
a locator that followed links naively would find."""
from __future__ import annotations

import logging
import os
import shutil

import pytest

import cdi.ldcache as ldcache
from cdi.driver_files import LIBRARY, locate_driver_files

from .helpers import X86_64_LIBC6, build_library, make_socket, run_ldconfig, write_ld_cache
from .fake_driver_root import LIB, V, build_driver_root


@pytest.fixture
def outside(tmp_path):
    return build_driver_root(str(tmp_path / "host"))


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "hostile-root"
    r.mkdir()
    return str(r)


def locate(root, caps="all", **kw):
    kw.setdefault("mps_pipe_directory", "/tmp/nvidia-mps")
    return locate_driver_files(root, V, caps, machine="x86_64", **kw)


def assert_inside(root, files):
    real_root = os.path.realpath(root)
    for f in files.files:
        assert f.host_path.startswith(root + "/"), f
        assert os.path.realpath(f.host_path).startswith(real_root + "/"), f
        assert os.path.lexists(f.host_path), f


def test_the_outside_installation_is_complete(outside):
    # The bait is real: located as a root of its own, it yields every kind of file.
    kinds = {f.kind for f in locate(outside).files}
    assert kinds == {"library", "library32", "binary", "firmware", "ipc-socket", "mps-dir"}


@pytest.mark.parametrize("with_cache", [True, False])
def test_library_directory_linked_to_an_absolute_host_path(root, outside, with_cache):
    os.makedirs(f"{root}/usr/lib")
    os.symlink(outside + LIB, root + LIB)
    os.symlink("/usr/lib/i386-linux-gnu", f"{root}/usr/lib/i386-linux-gnu")
    if with_cache:
        os.makedirs(f"{root}/etc")
        shutil.copy(f"{outside}/etc/ld.so.cache", f"{root}/etc/ld.so.cache")
    files = locate(root)
    assert files.libraries == ()
    assert_inside(root, files)


def test_library_directory_linked_to_the_hosts_own_directory(root, outside):
    # /usr/lib/x86_64-linux-gnu -> /usr/lib/x86_64-linux-gnu: names the root's own directory.
    os.makedirs(f"{root}/usr/lib")
    os.symlink(LIB, root + LIB)
    os.makedirs(f"{root}/etc")
    shutil.copy(f"{outside}/etc/ld.so.cache", f"{root}/etc/ld.so.cache")
    files = locate(root)   # a self-referencing link: a loop, logged and skipped
    assert files.files == ()


def test_dotdot_climbing_links(root, outside):
    climb = "../" * 30
    os.makedirs(root + LIB)
    for name in (f"libcuda.so.{V}", "libcuda.so.1", f"libnvidia-ml.so.{V}"):
        os.symlink(climb + outside.lstrip("/") + f"{LIB}/{name}", f"{root}{LIB}/{name}")
    os.makedirs(f"{root}/usr/bin")
    os.symlink(climb + outside.lstrip("/") + "/usr/bin/nvidia-smi", f"{root}/usr/bin/nvidia-smi")
    os.makedirs(f"{root}/lib/firmware/nvidia")
    os.symlink(climb + outside.lstrip("/") + f"/lib/firmware/nvidia/{V}",
               f"{root}/lib/firmware/nvidia/{V}")
    files_scan = locate(root)
    run_ldconfig(root, [LIB])
    files_cache = locate(root)
    for files in (files_scan, files_cache):
        assert files.files == ()


def test_everything_else_linked_out(root, outside):
    for path in ("/usr/bin/nvidia-smi", "/sbin/nvidia-persistenced", "/tmp/nvidia-mps",
                 f"/lib/firmware/nvidia/{V}", "/run/nvidia-persistenced/socket"):
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        os.symlink(outside + path, root + path)
    os.makedirs(f"{root}/var")
    os.symlink(f"{outside}/run", f"{root}/var/run")
    files = locate(root)
    assert files.files == ()


def test_loops_are_logged_and_skipped(root, caplog):
    os.makedirs(root + LIB)
    os.symlink("libcuda.so.1", f"{root}{LIB}/libcuda.so.1")
    os.symlink("b", f"{root}{LIB}/a")
    os.symlink("a", f"{root}{LIB}/b")
    os.symlink("a", f"{root}{LIB}/libnvidia-ml.so.{V}")
    os.makedirs(f"{root}/usr/bin")
    os.symlink("/usr/bin", f"{root}/usr/bin/nvidia-smi-dir")
    os.symlink("nvidia-smi", f"{root}/usr/bin/nvidia-smi")
    os.symlink("/var", f"{root}/var")
    build_library(f"{root}{LIB}/libnvidia-cfg.so.{V}", "libnvidia-cfg.so.1")
    os.makedirs(f"{root}/etc")
    write_ld_cache(f"{root}/etc/ld.so.cache", [
        ("libcuda.so.1", f"{LIB}/libcuda.so.1", X86_64_LIBC6),
        ("libnvidia-ml.so.1", f"{LIB}/libnvidia-ml.so.{V}", X86_64_LIBC6),
        ("libnvidia-cfg.so.1", f"{LIB}/libnvidia-cfg.so.{V}", X86_64_LIBC6),
    ])
    with caplog.at_level(logging.WARNING, logger="cdi.driver_files"):
        files = locate(root)
    assert [f.container_path for f in files.files] == [f"{LIB}/libnvidia-cfg.so.{V}"]
    assert any("too many levels of symbolic links" in r.getMessage() for r in caplog.records)


def test_cache_entries_pointing_outside(root, outside):
    os.makedirs(root + LIB)
    build_library(f"{root}{LIB}/libnvidia-cfg.so.{V}", "libnvidia-cfg.so.1")
    os.makedirs(f"{root}/etc")
    write_ld_cache(f"{root}/etc/ld.so.cache", [
        ("libcuda.so.1", f"{outside}{LIB}/libcuda.so.{V}", X86_64_LIBC6),
        ("libnvidia-ml.so.1", "/../../../../.." + outside + f"{LIB}/libnvidia-ml.so.{V}",
         X86_64_LIBC6),
        ("libnvidia-ptxjitcompiler.so.1",
         "../../../../" + outside.lstrip("/") + f"{LIB}/libnvidia-ptxjitcompiler.so.{V}",
         X86_64_LIBC6),
        ("libnvidia-cfg.so.1", f"{LIB}/libnvidia-cfg.so.{V}", X86_64_LIBC6),   # the one real one
    ])
    files = locate(root)
    assert [(f.kind, f.host_path) for f in files.files] == [
        (LIBRARY, f"{root}{LIB}/libnvidia-cfg.so.{V}")]


def test_absolute_links_inside_the_root_resolve_inside_it(root, outside):
    # The same names exist outside; the root's own absolute link must land on the root's file.
    os.makedirs(root + LIB)
    build_library(f"{root}/opt/nvidia/libcuda.so.{V}", "libcuda.so.1")
    os.symlink(f"/opt/nvidia/libcuda.so.{V}", f"{root}{LIB}/libcuda.so.1")
    os.makedirs(f"{root}/etc")
    write_ld_cache(f"{root}/etc/ld.so.cache",
                   [("libcuda.so.1", f"{LIB}/libcuda.so.1", X86_64_LIBC6)])
    (cuda,) = locate(root, ["compute"]).libraries
    assert cuda.host_path == f"{root}/opt/nvidia/libcuda.so.{V}"
    assert cuda.container_path == f"/opt/nvidia/libcuda.so.{V}"


def test_soname_with_a_path_gets_no_links(root, caplog):
    build_library(f"{root}{LIB}/libnvidia-ml.so.{V}", "../../../../etc/ld.so.preload")
    with caplog.at_level(logging.WARNING, logger="cdi.driver_files"):
        (ml,) = locate(root, ["utility"]).libraries
    assert ml.soname is None and ml.symlinks == ()
    assert any("not a plain file name" in r.getMessage() for r in caplog.records)


def test_special_files_are_not_taken(root):
    os.makedirs(root + LIB)
    os.mkfifo(f"{root}{LIB}/libcuda.so.{V}")
    make_socket(f"{root}{LIB}/libnvidia-ml.so.{V}")
    os.makedirs(f"{root}/usr/bin/nvidia-smi")
    os.makedirs(f"{root}/etc")
    os.mkfifo(f"{root}/etc/ld.so.cache.fifo")
    files = locate(root)        # no cache: scanning meets a fifo and a socket, takes neither
    assert files.files == ()


@pytest.mark.parametrize("link", ["itself", "absolute", "climbing"])
def test_cache_file_linked_out_is_never_read(root, outside, link, monkeypatch):
    targets = {"itself": "/etc/ld.so.cache",
               "absolute": f"{outside}/etc/ld.so.cache",
               "climbing": "../" * 20 + outside.lstrip("/") + "/etc/ld.so.cache"}
    read = []
    real = ldcache.parse_ld_cache   # imported by the search when it reads the cache
    monkeypatch.setattr(ldcache, "parse_ld_cache", lambda *a: read.append(a[1]) or real(*a))
    os.makedirs(f"{root}/etc")
    os.symlink(targets[link], f"{root}/etc/ld.so.cache")
    files = locate(root)
    assert read == [] and files.files == ()
