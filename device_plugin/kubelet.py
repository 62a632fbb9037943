"""The kubelet side: its socket (kubelet.sock in the device-plugin folder) and Register.

The socket is checked before it is dialled: a regular file or a symlink there is refused with one line
(gRPC would otherwise wait out its connect timeout and say only "failed to connect"). Its identity
(device, inode, change time) tells the plugin that the kubelet restarted: a new kubelet makes a new socket, and
every plugin must register again.
"""
from __future__ import annotations

import os
import stat

import grpc

from cdi.errors import CdiError
from device_plugin.api import deviceplugin_v1beta1_pb2 as pb
from device_plugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc

KUBELET_SOCKET = "kubelet.sock"
API_VERSION = "v1beta1"
REGISTER_TIMEOUT = 5.0


class KubeletError(CdiError):
    """The kubelet cannot be reached or refused the registration."""


def kubelet_socket(device_plugin_dir: str) -> str:
    return os.path.join(device_plugin_dir, KUBELET_SOCKET)


def socket_identity(path: str) -> tuple[int, int, int] | None:
    """(device, inode, change time) of the socket at path; None when there is no socket there. The
    time tells a new socket from the old one when the file system hands the new one the freed inode."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns) if stat.S_ISSOCK(st.st_mode) else None


def check_kubelet_socket(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise KubeletError("the kubelet's socket is not there (is the kubelet running?)", path) from None
    except OSError as e:
        raise KubeletError(f"cannot look at the kubelet's socket: {e.strerror}", path) from None
    if stat.S_ISLNK(st.st_mode):
        raise KubeletError("the kubelet's socket is a symlink, not a socket; refusing to follow it", path)
    if not stat.S_ISSOCK(st.st_mode):
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "not a socket"
        raise KubeletError(f"the kubelet's socket is {kind}, not a socket", path)


def register(device_plugin_dir: str, endpoint: str, resource_name: str, options: pb.DevicePluginOptions,
             timeout: float = REGISTER_TIMEOUT) -> None:
    """Registers the plugin serving `endpoint` (a socket name in device_plugin_dir) for resource_name."""
    path = kubelet_socket(device_plugin_dir)
    check_kubelet_socket(path)
    request = pb.RegisterRequest(version=API_VERSION, endpoint=endpoint, resource_name=resource_name,
                                 options=options)
    with grpc.insecure_channel(f"unix:{path}") as channel:
        try:
            pb_grpc.RegistrationStub(channel).Register(request, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as e:
            raise KubeletError(f"registering {resource_name} failed: {e.details() or e.code().name}", path) from None
