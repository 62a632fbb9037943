"""Fixtures for the device plugin's unit tests: simulated hosts (built once per session by the
simulator, read back from their marker), and a stand-in for the kubelet's Registration service on
its own kubelet.sock in a temp dir, which records what the plugins register. The real kubelet is the
e2e tests' job."""
from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent import futures

import grpc
import pytest

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.support.simulated_host import create_in_process, inventory_from_marker

HOSTS = {
    "plain": dict(gpus=2, mig_options=()),
    "mig-one": dict(gpus=2, mig_options=("1=1g.5gb,1g.5gb",)),            # GPU 0 whole, GPU 1 MIG
    "mig-all-same": dict(gpus=2, mig_options=("0=1g.5gb,1g.5gb", "1=1g.5gb")),
    "mig-all-mixed": dict(gpus=2, mig_options=("0=3g.20gb,1g.5gb", "1=2g.10gb")),
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


class FakeKubelet(pb_grpc.RegistrationServicer):
    """Records every RegisterRequest; answers with `refuse` as an error when set."""

    def __init__(self, folder: str):
        self.folder, self.requests, self.refuse = folder, [], None
        self.registered = threading.Condition()
        self.server = None

    def Register(self, request, context):
        if self.refuse:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse)
        with self.registered:
            self.requests.append(request)
            self.registered.notify_all()
        return pb.Empty()

    def start(self) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        assert self.server.add_insecure_port(f"unix:{os.path.join(self.folder, 'kubelet.sock')}")
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(None).wait()
            self.server = None

    def restart(self) -> None:
        """As a restarted kubelet: a new kubelet.sock (the plugins must register again)."""
        self.stop()   # grpc removes its socket; a kubelet's own may stay until the new one replaces it
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.folder, "kubelet.sock"))
        self.start()

    def wait_for(self, count: int, seconds: float = 30.0) -> list:
        """The requests once there are count of them (a wait for the plugin, not a speed check)."""
        end = time.monotonic() + seconds
        with self.registered:
            while len(self.requests) < count and time.monotonic() < end:
                self.registered.wait(0.1)
            return list(self.requests)


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
