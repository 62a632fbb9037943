"""The node's mount namespace (tests.support.kube.namespace) on a machine with mounts below /etc and
/var, as in a container (a bind-mounted /etc/hostname, /etc/hosts, /etc/resolv.conf) or with a /var/lib
of its own: they are seen inside as on the machine, and what the node writes there stays in its layers."""
from __future__ import annotations

import os

import pytest

from tests.support.kube.namespace import MountNamespace
from tests.support.mountns import bind_mount, cover_with_tmpfs, run_in_private_mount_ns

pytestmark = pytest.mark.e2e


def _node_on_a_machine_with_mounts_below_etc_and_var(tmp_path) -> tuple[str, str, list[str]]:
    """(in the test's private namespace) /etc/hostname a file of ours, /var/tmp a tmpfs of ours with a
    file in it; the node namespace reads both and writes a file in /var/tmp."""
    mounted = tmp_path / "hostname"
    mounted.write_text("gct-mounted-hostname\n")
    bind_mount(str(mounted), "/etc/hostname")
    cover_with_tmpfs("/var/tmp", "gct-var-tmp", mode="1777")
    with open("/var/tmp/gct-was-there", "w") as f:
        f.write("machine's\n")
    node = MountNamespace(tmp_path / "layers").start()
    try:
        seen = node.run(["sh", "-c", "cat /etc/hostname /var/tmp/gct-was-there && touch /var/tmp/gct-node-wrote"],
                        capture_output=True, text=True, check=True).stdout
    finally:
        node.stop()
    return seen, sorted(os.listdir("/var/tmp")), sorted(os.listdir(tmp_path / "layers" / "var-tmp-upper"))


def test_mounts_below_etc_and_var_are_seen_in_the_node_and_written_to_its_layers(tmp_path):
    if os.geteuid() != 0 or not os.path.isfile("/etc/hostname") or not os.path.isdir("/var/tmp"):
        pytest.skip("needs root, /etc/hostname and /var/tmp to mount on")
    seen, machine, layer = run_in_private_mount_ns(_node_on_a_machine_with_mounts_below_etc_and_var, tmp_path)
    assert seen == "gct-mounted-hostname\nmachine's\n"
    assert machine == ["gct-was-there"]         # the node's write did not reach the mount below /var
    assert layer == ["gct-node-wrote"]
