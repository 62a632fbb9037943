"""Device cgroup v2 (eBPF) on a real cgroup2 mount: a runtime-style program denies everything but a few
nodes; ours replaces it, allows the added devices and leaves the runtime's verdicts as they were.
Checked with open() from a child inside the cgroup: ENXIO = allowed (no driver), EPERM = denied."""
import errno
import os
import stat

import pytest

from libcontainer_c.device_cgroup import (DeviceRule, allow_devices_v2, cgroup2_path_of,
                                          device_programs_attached, device_rule,
                                          find_cgroup2_hierarchy, install_device_program)
from libcontainer_c.errors import ContainerFsError
from tests.support.cgroups import major_is_free, open_errnos_in, temporary_cgroup


def _hierarchy():
    try:
        return find_cgroup2_hierarchy()
    except OSError:
        return None


HIERARCHY = _hierarchy()
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and bpf need root"),
    pytest.mark.skipif(HIERARCHY is None, reason="no cgroup2 mount"),
    pytest.mark.skipif(not major_is_free(195), reason="major 195 has a driver here"),
]

# what runc would attach: deny all, then a few standard nodes (the last matching rule wins)
RUNTIME_RULES = [DeviceRule("a", "*", "*", "rwm", allow=False),
                 DeviceRule("c", 1, 3, "rwm"), DeviceRule("c", 1, 5, "rwm"),
                 DeviceRule("c", 195, 252, "rw")]


@pytest.fixture
def cgroup():
    with temporary_cgroup(HIERARCHY) as name:  # attached programs go with the cgroup
        yield name


@pytest.fixture
def nodes(tmp_path):
    made = {}
    for minor in (250, 251, 252):
        made[minor] = tmp_path / f"nvidia{minor}"
        os.mknod(made[minor], stat.S_IFCHR | 0o666, os.makedev(195, minor))
    return made


def open_errnos(cgroup, paths, flags=os.O_RDWR):
    """errno of open() of each path by one child placed in the cgroup (0: it opened)."""
    return open_errnos_in(os.path.join(HIERARCHY, cgroup), paths, flags)


def test_replacement_allows_ours_and_keeps_the_runtime_rules(cgroup, nodes):
    install_device_program(cgroup, RUNTIME_RULES)
    assert device_programs_attached(cgroup) == 1
    probe = ["/dev/null", "/dev/zero", "/dev/full", nodes[250], nodes[251], nodes[252]]
    assert open_errnos(cgroup, probe) == [0, 0, errno.EPERM, errno.EPERM, errno.EPERM, errno.ENXIO]

    allow_devices_v2(cgroup, [device_rule("c", 195, 250, "rw")])
    assert device_programs_attached(cgroup) == 1  # replaced, not added (programs are ANDed)
    assert open_errnos(cgroup, probe) == [0, 0, errno.EPERM, errno.ENXIO, errno.EPERM, errno.ENXIO]

    # a second injection chains again; earlier grants stay
    allow_devices_v2(f"/{cgroup}", [device_rule("c", 195, 251, "r")])
    assert device_programs_attached(cgroup) == 1
    assert open_errnos(cgroup, [nodes[250], nodes[251]]) == [errno.ENXIO, errno.EPERM]  # 251: read only
    assert open_errnos(cgroup, [nodes[251]], os.O_RDONLY) == [errno.ENXIO]


def test_without_keep_existing_only_the_new_rules_count(cgroup, nodes):
    install_device_program(cgroup, RUNTIME_RULES)
    install_device_program(cgroup, [DeviceRule("c", 195, "*", "rw")])
    assert device_programs_attached(cgroup) == 1
    assert open_errnos(cgroup, ["/dev/null", nodes[250]]) == [errno.EPERM, errno.ENXIO]


def test_deny_rule_after_allow_wins(cgroup, nodes):
    install_device_program(cgroup, [DeviceRule("a", "*", "*", "rwm"),
                                    DeviceRule("c", 195, 251, "w", allow=False)])
    assert open_errnos(cgroup, [nodes[250], nodes[251]]) == [errno.ENXIO, errno.EPERM]
    assert open_errnos(cgroup, [nodes[251]], os.O_RDONLY) == [errno.ENXIO]


def test_errors(cgroup, tmp_path):
    rule = [device_rule("c", 195, 0)]
    with pytest.raises(ContainerFsError) as info:
        allow_devices_v2(f"{cgroup}/missing", rule)
    assert info.value.errno == errno.ENOENT and "missing" in str(info.value)
    with pytest.raises(ContainerFsError) as info:
        allow_devices_v2(cgroup, rule, hierarchy=str(tmp_path))
    assert info.value.errno == errno.EXDEV
    with pytest.raises(ContainerFsError) as info:
        allow_devices_v2("../..", rule)
    assert info.value.errno == errno.EPERM


def test_rules_from_oci_config():
    rules = [DeviceRule.from_oci(e) for e in (
        {"allow": False, "access": "rwm"},
        {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rw"},
        {"allow": True, "type": "c", "major": 136, "access": "rwm"})]
    assert [(str(r), r.allow) for r in rules] == [
        ("a *:* rwm", False), ("c 195:0 rw", True), ("c 136:* rwm", True)]


def test_cgroup2_path_of_self():
    path = cgroup2_path_of(os.getpid())
    assert path.startswith("/")
