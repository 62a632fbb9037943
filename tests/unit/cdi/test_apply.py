"""Applying edits to an OCI spec exactly as CDI consumers do (docs/reference.md#cdi-apply)."""
import copy
import os
import stat
from types import SimpleNamespace

import pytest

from cdi.apply import apply_edits, apply_env, fill_device_node
from cdi.errors import SpecError
from cdi.spec import ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice


def oci():
    return {
        "process": {"env": ["PATH=/bin", "A=old", "B=1", "A=older-dup"], "user": {"uid": 0, "gid": 0}},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                   {"destination": "/usr/lib/x", "source": "/old"}],
        "linux": {"devices": [{"path": "/dev/mydev", "type": "c", "major": 1, "minor": 5}],
                  "resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }


def fake_stat(nodes):
    def stat_fn(path):
        if path not in nodes:
            raise FileNotFoundError(2, "No such file or directory", path)
        mode, major, minor = nodes[path]
        return SimpleNamespace(st_mode=mode, st_rdev=os.makedev(major, minor))
    return stat_fn


def test_env_replaces_in_place_and_appends():
    assert apply_env(["A=1", "B=2", "A=3"], ["A=x", "C=4", "C=5"]) == ["A=1", "B=2", "A=x", "C=5"]
    result = apply_edits(oci(), ContainerEdits(env=["B=2", "NEW=1"]))
    assert result["process"]["env"] == ["PATH=/bin", "A=old", "B=2", "A=older-dup", "NEW=1"]


def test_device_node_filled_from_host_and_deduplicated():
    stat_fn = fake_stat({"/dev/null": (stat.S_IFCHR | 0o666, 1, 3)})
    edits = ContainerEdits(device_nodes=[DeviceNode(path="/dev/mydev", host_path="/dev/null")])
    result = apply_edits(oci(), edits, stat_fn)
    assert result["linux"]["devices"] == [{"path": "/dev/mydev", "type": "c", "major": 1, "minor": 3,
                                           "fileMode": 0o666}]
    assert result["linux"]["resources"]["devices"][-1] == {"allow": True, "type": "c", "major": 1, "minor": 3,
                                                           "access": "rwm"}


def test_device_node_with_real_host_node():
    result = apply_edits({}, ContainerEdits(device_nodes=[DeviceNode(path="/dev/null", permissions="rw")]))
    st = os.stat("/dev/null")
    assert result["linux"]["devices"][0]["major"] == os.major(st.st_rdev)
    assert result["linux"]["resources"]["devices"][0]["access"] == "rw"


def test_complete_device_node_needs_no_host_node():
    node = DeviceNode(path="/dev/nvidia0", type="c", major=195, minor=0)
    filled = fill_device_node(node, fake_stat({}))
    assert (filled.type, filled.major, filled.minor, filled.file_mode) == ("c", 195, 0, None)


def test_block_device_and_fifo():
    stat_fn = fake_stat({"/dev/sda": (stat.S_IFBLK | 0o660, 8, 0), "/run/p": (stat.S_IFIFO | 0o600, 0, 0)})
    result = apply_edits({}, ContainerEdits(device_nodes=[DeviceNode(path="/dev/sda"),
                                                          DeviceNode(path="/p", host_path="/run/p")]), stat_fn)
    assert [d["type"] for d in result["linux"]["devices"]] == ["b", "p"]
    assert len(result["linux"]["resources"]["devices"]) == 1  # no cgroup rule for a fifo


@pytest.mark.parametrize("nodes, node, message", [
    ({}, DeviceNode(path="/dev/missing"), "cannot stat device node"),
    ({"/etc/x": (stat.S_IFREG | 0o644, 0, 0)}, DeviceNode(path="/etc/x"), "not a device node"),
    ({"/dev/sda": (stat.S_IFBLK | 0o660, 8, 0)}, DeviceNode(path="/dev/sda", type="c"), "does not match"),
])
def test_device_node_errors_leave_the_spec_untouched(nodes, node, message):
    original = oci()
    before = copy.deepcopy(original)
    edits = ContainerEdits(env=["X=1"], device_nodes=[node])
    with pytest.raises(SpecError) as info:
        apply_edits(original, edits, fake_stat(nodes))
    assert message in str(info.value)
    assert original == before


def test_device_owner_follows_a_non_root_process_user():
    spec = {"process": {"user": {"uid": 1000, "gid": 100}}}
    result = apply_edits(spec, ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", type="c", major=1, minor=3,
                                                                       file_mode=0o600)]))
    assert (result["linux"]["devices"][0]["uid"], result["linux"]["devices"][0]["gid"]) == (1000, 100)


def test_mounts_replace_by_destination_then_sort_by_depth():
    edits = ContainerEdits(mounts=[
        Mount(host_path="/host/a/b/c", container_path="/a/b/c", options=["ro", "bind"]),
        Mount(host_path="/host/lib", container_path="/usr/lib/x", options=["bind"]),
        Mount(host_path="/host/a", container_path="/a", type="bind"),
    ])
    result = apply_edits(oci(), edits)
    assert [m["destination"] for m in result["mounts"]] == ["/proc", "/dev", "/a", "/a/b/c", "/usr/lib/x"]
    # the replaced mount went to the end before the stable sort: after /a/b/c, same depth
    replaced = [m for m in result["mounts"] if m["destination"] == "/usr/lib/x"]
    assert replaced == [{"destination": "/usr/lib/x", "source": "/host/lib", "options": ["bind"]}]
    assert result["mounts"][2] == {"destination": "/a", "source": "/host/a", "type": "bind"}


def test_hooks_are_appended_in_order():
    spec = {"hooks": {"prestart": [{"path": "/docker-hook"}]}}
    edits = ContainerEdits(hooks=[
        Hook(hook_name="prestart", path="/a", args=["a"], env=["PATH=/bin"], timeout=5),
        Hook(hook_name="createContainer", path="/b"),
    ])
    result = apply_edits(spec, edits)
    assert result["hooks"]["prestart"] == [{"path": "/docker-hook"},
                                           {"path": "/a", "args": ["a"], "env": ["PATH=/bin"], "timeout": 5}]
    assert result["hooks"]["createContainer"] == [{"path": "/b"}]


def test_rdt_gids_and_net_devices():
    edits = ContainerEdits(intel_rdt=IntelRdt(clos_id="gpu"), additional_gids=[44, 44, 27],
                           net_devices=[NetDevice(host_interface_name="ib0", name="net1")])
    result = apply_edits({"process": {"user": {"uid": 0, "gid": 0, "additionalGids": [27]}}}, edits)
    assert result["linux"]["intelRdt"] == {"closID": "gpu"}
    assert result["process"]["user"]["additionalGids"] == [27, 44]
    assert result["linux"]["netDevices"] == {"ib0": {"name": "net1"}}


def test_input_is_never_modified():
    original = oci()
    before = copy.deepcopy(original)
    apply_edits(original, ContainerEdits(env=["A=1"], mounts=[Mount(host_path="/x", container_path="/x")]))
    assert original == before
