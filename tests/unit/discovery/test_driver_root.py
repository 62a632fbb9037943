"""cdi.driver_root: paths resolve inside the root whatever its links say."""
from __future__ import annotations

import os

import pytest

from cdi.driver_root import DriverRoot, DriverRootError, SymlinkLoopError


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (r / "usr/lib/x86_64-linux-gnu/libreal.so.1").write_text("x")
    (r / "etc").mkdir()
    (r / "etc/file").write_text("f")
    (r / "run").mkdir()
    return r


def test_plain_path(root):
    dr = DriverRoot(str(root))
    assert dr.resolve("/usr/lib/x86_64-linux-gnu/libreal.so.1") == \
        "/usr/lib/x86_64-linux-gnu/libreal.so.1"
    assert dr.resolve("usr/lib") == "/usr/lib"   # relative is taken from the root
    assert dr.resolve("/") == "/"
    assert dr.host_path("/usr/lib") == f"{root}/usr/lib"
    assert dr.host_path("/") == str(root)


def test_absolute_link_restarts_at_the_root(root):
    os.symlink("/usr/lib", root / "lib")
    os.symlink("/run", root / "var")     # var -> /run, as on hosts with /var/run -> /run
    dr = DriverRoot(str(root))
    assert dr.resolve("/lib/x86_64-linux-gnu/libreal.so.1") == \
        "/usr/lib/x86_64-linux-gnu/libreal.so.1"
    assert dr.resolve("/var") == "/run"


def test_dotdot_clamps_at_the_root(root, tmp_path):
    (tmp_path / "outside").write_text("host secret")
    os.symlink("../../../../../../outside", root / "etc/up")
    dr = DriverRoot(str(root))
    assert dr.resolve("/etc/up") is None           # would be root/outside: does not exist
    assert dr.resolve("/../../etc/file") == "/etc/file"
    (root / "outside").write_text("inside")
    assert dr.resolve("/etc/up") == "/outside"


def test_absolute_link_to_a_host_path_stays_inside(root, tmp_path):
    outside = tmp_path / "host-lib"
    outside.mkdir()
    (outside / "libevil.so.1").write_text("evil")
    os.symlink(str(outside), root / "usr/lib/evil")
    dr = DriverRoot(str(root))
    assert dr.resolve("/usr/lib/evil/libevil.so.1") is None


def test_relative_link_chain(root):
    d = root / "usr/lib/x86_64-linux-gnu"
    os.symlink("libreal.so.1", d / "libreal.so")
    os.symlink("./x86_64-linux-gnu/../x86_64-linux-gnu/libreal.so", root / "usr/lib/alias")
    dr = DriverRoot(str(root))
    assert dr.resolve("/usr/lib/alias") == "/usr/lib/x86_64-linux-gnu/libreal.so.1"


def test_loops_are_detected(root):
    os.symlink("b", root / "etc/a")
    os.symlink("a", root / "etc/b")
    os.symlink("self", root / "etc/self")
    os.symlink("/etc/deep/x", root / "etc/deep")   # grows forever
    dr = DriverRoot(str(root))
    for name in ("a", "self", "deep"):
        with pytest.raises(SymlinkLoopError, match="too many levels of symbolic links"):
            dr.resolve(f"/etc/{name}")


def test_missing_and_not_a_directory(root):
    dr = DriverRoot(str(root))
    assert dr.resolve("/no/such/file") is None
    assert dr.resolve("/etc/file/below") is None
    os.symlink("/nowhere", root / "etc/dangling")
    assert dr.resolve("/etc/dangling") is None


def test_listdir_and_stat(root):
    dr = DriverRoot(str(root))
    assert dr.listdir("/etc") == ["file"]
    assert dr.listdir("/missing") == []
    os.symlink("/usr", root / "etc/usrlink")
    assert dr.stat("/etc/usrlink").st_mode & 0o170000 == 0o120000  # lstat: the link itself
    assert dr.listdir("/etc/usrlink") == []      # a link is never opened as a directory


def test_bad_roots(tmp_path):
    with pytest.raises(DriverRootError, match="is not a directory"):
        (tmp_path / "f").write_text("")
        DriverRoot(str(tmp_path / "f"))
    with pytest.raises(DriverRootError, match="No such file"):
        DriverRoot(str(tmp_path / "missing"))
    with pytest.raises(DriverRootError, match="empty"):
        DriverRoot("")


def test_slash_root():
    dr = DriverRoot("/")
    assert dr.host_path("/etc") == "/etc"
    assert dr.resolve("/etc/..") == "/"
