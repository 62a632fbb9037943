"""Fixtures for the device plugin's unit tests: simulated hosts (built once per session by the
simulator, read back from their marker), and the recording Registration service
(tests.support.kubelet_registration) on its own kubelet.sock in a temp dir. The real kubelet is the
e2e tests' job."""
from __future__ import annotations

import grpc
import pytest

from tests.support.kubelet_registration import FakeKubelet
from tests.support.simulated_host import create_in_process, inventory_from_marker

HOSTS = {
    "plain": dict(gpus=2, mig_options=()),
    "mig-one": dict(gpus=2, mig_options=("1=1g.5gb,1g.5gb",)),            # GPU 0 whole, GPU 1 MIG
    "mig-all-same": dict(gpus=2, mig_options=("0=1g.5gb,1g.5gb", "1=1g.5gb")),
    "mig-all-mixed": dict(gpus=2, mig_options=("0=3g.20gb,1g.5gb", "1=2g.10gb")),
    "mig-media": dict(gpus=2, mig_options=("0=1g.5gb+me,1g.5gb", "1=1g.5gb")),  # +me: media extensions
}


@pytest.fixture(scope="session")
def sim_hosts(tmp_path_factory):
    """name -> (root, cdi.inventory.Inventory) of each host in HOSTS."""
    base = tmp_path_factory.mktemp("dp-hosts")
    hosts = {}
    for name, options in HOSTS.items():
        root = base / name
        create_in_process(root, gpus=options["gpus"], mig_options=options["mig_options"])
        hosts[name] = (root, inventory_from_marker(root))
    return hosts


@pytest.fixture
def plugin_dir(tmp_path):
    folder = tmp_path / "dp"
    folder.mkdir()
    return folder


@pytest.fixture
def kubelet(plugin_dir):
    fake = FakeKubelet(str(plugin_dir))
    fake.start()
    yield fake
    fake.stop()


def channel_to(socket_path) -> grpc.Channel:
    return grpc.insecure_channel(f"unix:{socket_path}")
