"""Device cgroup v1 rules, checked the way the kernel enforces them (docs/reference.md#device-cgroup):
opening a char node 195:x with no driver gives ENXIO when the cgroup allows it and EPERM when it does
not. The test makes its own cgroup under the devices hierarchy, runs a child inside it, and removes it
afterwards."""
import errno
import os
import stat
import time

import pytest

from libcontainer_c.device_cgroup import (DEFAULT_HIERARCHY, allow_devices, deny_devices,
                                          device_rule, devices_cgroup_of, find_devices_hierarchy)
from libcontainer_c.errors import ContainerFsError
from tests.support.cgroups import major_is_free, open_errnos_in, temporary_cgroup


def _has_v1_devices() -> bool:
    try:
        return find_devices_hierarchy() == DEFAULT_HIERARCHY
    except (OSError, ValueError):
        return False


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root"),
    pytest.mark.skipif(not _has_v1_devices(), reason="no cgroup v1 devices hierarchy"),
    pytest.mark.skipif(not major_is_free(195), reason="major 195 has a driver here"),
]


@pytest.fixture
def cgroup():
    with temporary_cgroup(DEFAULT_HIERARCHY) as name:
        yield name


def open_errno_in(cgroup: str, node) -> int:
    """errno of open(node, O_RDWR) by a child placed in the cgroup (0 if it opened)."""
    return open_errnos_in(os.path.join(DEFAULT_HIERARCHY, cgroup), [node])[0]


def test_allow_rule_turns_eperm_into_enxio(cgroup, tmp_path):
    nodes = {}
    for minor in (250, 251):
        nodes[minor] = tmp_path / f"nvidia{minor}"
        os.mknod(nodes[minor], stat.S_IFCHR | 0o666, os.makedev(195, minor))
    deny_devices(cgroup, ["a *:* rwm"])
    assert open_errno_in(cgroup, nodes[250]) == errno.EPERM

    allow_devices(f"/{cgroup}", [device_rule("c", 195, 250, "rw")])
    assert open_errno_in(cgroup, nodes[250]) == errno.ENXIO   # allowed; no driver behind it
    assert open_errno_in(cgroup, nodes[251]) == errno.EPERM   # still denied
    with open(os.path.join(DEFAULT_HIERARCHY, cgroup, "devices.list")) as f:
        assert f.read().split("\n")[0] == "c 195:250 rw"


def test_paths_that_leave_the_hierarchy_are_refused(cgroup, tmp_path):
    rule = device_rule("c", 195, 0)
    with pytest.raises(ContainerFsError) as info:
        allow_devices(f"{cgroup}/../..", [rule])
    assert info.value.errno == errno.EPERM
    with pytest.raises(ContainerFsError) as info:
        allow_devices("/", [rule], hierarchy=str(tmp_path))  # not a cgroup v1 mount
    assert info.value.errno == errno.EXDEV
    with pytest.raises(ContainerFsError) as info:
        allow_devices(f"{cgroup}/missing", [rule])
    assert info.value.errno == errno.ENOENT
    assert "devices.allow" in str(info.value) and "missing" in str(info.value)


def test_rule_format_is_checked():
    assert str(device_rule("c", 195, "*", "rwm")) == "c 195:* rwm"
    for bad in (("x", 1, 2), ("c", -1, 0), ("c", "1", 0), ("c", 1, 2, "rx"), ("c", 1, 2, "")):
        with pytest.raises(ValueError):
            device_rule(*bad)


def test_devices_cgroup_of_self():
    path = devices_cgroup_of(os.getpid())
    assert path.startswith("/")
    assert os.path.isdir(os.path.join(DEFAULT_HIERARCHY, path.lstrip("/")))


def test_allow_devices_for_a_process_picks_its_v1_cgroup(cgroup, tmp_path):
    from libcontainer_c.device_cgroup import allow_devices_for
    node = tmp_path / "nvidia250"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(195, 250))
    deny_devices(cgroup, ["a *:* rwm"])
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # sits in the cgroup until told to try the node
        code = 100
        try:
            with open(os.path.join(DEFAULT_HIERARCHY, cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            os.close(wfd)
            os.read(rfd, 1)
            try:
                os.close(os.open(node, os.O_RDWR))
                code = 0
            except OSError as err:
                code = err.errno
        finally:
            os._exit(code)
    os.close(rfd)
    try:
        for _ in range(100):  # until the child has joined the cgroup
            if devices_cgroup_of(pid) == f"/{cgroup}":
                break
            time.sleep(0.01)
        assert allow_devices_for(pid, [device_rule("c", 195, 250, "rw")]) == "v1"
    finally:
        os.write(wfd, b"x")
        os.close(wfd)
        _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == errno.ENXIO
