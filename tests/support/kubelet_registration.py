"""A recording stand-in for the kubelet's Registration service (device plugin API v1beta1) on its own
kubelet.sock: what the device plugin's unit tests and bench/device_plugin.py register against. It only
records RegisterRequests (and can refuse them); the real kubelet, which then calls the plugin, is the e2e
tests' job."""
from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent import futures

import grpc

from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc


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
