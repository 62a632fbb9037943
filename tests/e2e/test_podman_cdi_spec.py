"""A spec written by cdi.spec for a hand-made edits set is accepted by real podman 4.3, and the
container sees what it describes: an env var, a bind-mounted host file, a device node under a new name."""
from __future__ import annotations

import pytest

from cdi.spec import ContainerEdits, Device, DeviceNode, Mount, Spec
from cdi.spec_file import load_document

pytestmark = pytest.mark.e2e

KIND = "vendor.example/cls"
SCRIPT = ('echo "env=$GCT_CDI_TEST common=$GCT_CDI_COMMON"; cat /gct/hostfile; '
          'stat -c "node=%F %t:%T" /dev/mydev; echo hi > /dev/mydev && echo writable')


def hand_made_spec(host_file, device_name: str) -> Spec:
    edits = ContainerEdits(
        env=["GCT_CDI_TEST=hello from cdi"],
        device_nodes=[DeviceNode(path="/dev/mydev", host_path="/dev/null")],
        mounts=[Mount(host_path=str(host_file), container_path="/gct/hostfile", options=["ro", "nosuid", "bind"])],
    )
    return Spec(kind=KIND, devices=[Device(name=device_name, container_edits=edits)],
                container_edits=ContainerEdits(env=["GCT_CDI_COMMON=once"]))


@pytest.mark.parametrize("device_name, suffix", [("dev0", ".json"), ("0", ".yaml"), ("1:0", ".yaml")])
def test_podman_runs_a_container_with_our_spec(cdi_podman, tmp_path, device_name, suffix):  # noqa: F811
    host_file = tmp_path / "hostfile"
    host_file.write_text("content of the host file\n")
    host_file.chmod(0o644)
    spec = hand_made_spec(host_file, device_name)
    with cdi_podman.install_spec(spec, suffix) as path:
        document, _ = load_document(path)
        assert document["cdiVersion"] == "0.5.0"  # the oldest that can say hostPath; podman 4.3 takes <= 0.5.0
        if suffix == ".yaml":
            assert f'name: "{device_name}"' in path.read_text()
        result = cdi_podman.run("--device", f"{KIND}={device_name}", cdi_podman.image, "sh", "-c", SCRIPT)
    lines = result.stdout.splitlines()
    assert lines[0] == "env=hello from cdi common=once"
    assert lines[1] == "content of the host file"
    assert lines[2] == "node=character special file 1:3"  # /dev/null's numbers under the new name
    assert lines[3] == "writable"


def test_podman_refuses_an_unknown_cdi_device(cdi_podman, tmp_path):  # noqa: F811
    host_file = tmp_path / "hostfile"
    host_file.write_text("x\n")
    with cdi_podman.install_spec(hand_made_spec(host_file, "dev0")):
        result = cdi_podman.run("--device", f"{KIND}=nope", cdi_podman.image, "true", check=False)
    assert result.returncode != 0
    assert f"{KIND}=nope" in result.stderr
