"""cdi.transform_root (`nvidia-ctk cdi transform root`): NVIDIA's root transform, path by path."""
from __future__ import annotations

import pytest

from cdi.spec import Spec
from cdi.transform_root import transform_path, transform_root


@pytest.mark.parametrize("root, to, path, expected", [
    ("/run/nvidia/driver", "/", "/run/nvidia/driver/lib/libcuda.so", "/lib/libcuda.so"),
    ("/run/nvidia/driver", "/host", "/run/nvidia/driver", "/host"),
    ("/run/nvidia/driver", "/host", "/usr/lib/libcuda.so", "/usr/lib/libcuda.so"),
    ("/run/nvidia/driver", "/host", "/run/nvidia/driver-backup/lib/libcuda.so", "/run/nvidia/driver-backup/lib/libcuda.so"),
    ("/run/nvidia/driver", "/host", "/run/nvidia/driverfoo", "/run/nvidia/driverfoo"),
    ("/run/nvidia/driver/", "/host", "/run/nvidia/driver/lib/libcuda.so", "/host/lib/libcuda.so"),
    ("/", "/host", "/usr/lib/libcuda.so", "/host/usr/lib/libcuda.so"),
])
def test_transform_path(root, to, path, expected):
    assert transform_path(path, root, to) == expected


def spec(hooks=(), nodes=(), mounts=()):
    return Spec.from_dict({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": list(nodes)}}],
        "containerEdits": {"mounts": list(mounts), "hooks": list(hooks)}})


def test_host_paths_move_and_container_paths_stay():
    s = transform_root(spec(nodes=[{"path": "/root/dev/nvidia0"}, {"path": "/dev/nvidia1", "hostPath": "/root/dev/x"}],
                            mounts=[{"hostPath": "/root/lib/a.so", "containerPath": "/root/lib/a.so"}]),
                       "/root", "/target")
    assert [(n.path, n.host_path) for n in s.devices[0].container_edits.device_nodes] == [
        ("/root/dev/nvidia0", "/target/dev/nvidia0"), ("/dev/nvidia1", "/target/dev/x")]
    (m,) = s.container_edits.mounts
    assert (m.host_path, m.container_path) == ("/target/lib/a.so", "/root/lib/a.so")
    s = transform_root(s, "/root", "/c", "container")
    assert [n.path for n in s.devices[0].container_edits.device_nodes] == ["/c/dev/nvidia0", "/dev/nvidia1"]
    assert s.container_edits.mounts[0].container_path == "/c/lib/a.so"


def hook(name, path, *args):
    return {"hookName": name, "path": path, "args": list(args), "env": ["PATH=/bin"]}


def test_other_hooks_as_nvidias_tool_takes_them():
    hooks = [hook("createRuntime", "/root/bin/x", "x", "/root/a::/root/b"),
             hook("createContainer", "/root/bin/x", "x", "/root/a::/root/b"),
             hook("startContainer", "/root/bin/x", "x", "/root/a")]
    s = transform_root(spec(hooks=hooks), "/root", "/t")
    assert [(h.path, h.args) for h in s.container_edits.hooks] == [
        ("/t/bin/x", ["x", "/t/a::/t/b"]), ("/t/bin/x", ["x", "/root/a::/root/b"]), ("/root/bin/x", ["x", "/root/a"])]
    s = transform_root(spec(hooks=hooks), "/root", "/t", "container")
    assert [(h.path, h.args) for h in s.container_edits.hooks] == [
        ("/root/bin/x", ["x", "/root/a::/root/b"]), ("/root/bin/x", ["x", "/t/a::/t/b"]), ("/t/bin/x", ["x", "/t/a"])]


def test_an_nvidia_cdi_hook_entry_by_what_each_option_names():
    """Our entry is a createRuntime hook whose --link/--folder are container paths: a host transform
    moves only the hook program, --ldconfig-path and --params-file; a container one only those two."""
    args = ["nvidia-cdi-hook", "create-symlinks", "--link", "/root/lib/a.so.1::/root/lib/a.so", "update-ldcache",
            "--folder", "/root/lib", "--ldconfig-path", "@/root/sbin/ldconfig", "disable-device-node-modification",
            "--params-file=/root/proc/params"]
    s = transform_root(spec(hooks=[hook("createRuntime", "/root/bin/nvidia-cdi-hook", *args)]), "/root", "/t")
    (h,) = s.container_edits.hooks
    assert h.path == "/t/bin/nvidia-cdi-hook"
    assert h.args == [*args[:7], "--ldconfig-path", "@/t/sbin/ldconfig", args[9], "--params-file=/t/proc/params"]
    s = transform_root(spec(hooks=[hook("createRuntime", "/root/bin/nvidia-ctk", "nvidia-ctk", "hook", *args[1:])]),
                       "/root", "/t", "container")
    (h,) = s.container_edits.hooks
    assert h.path == "/root/bin/nvidia-ctk"
    assert h.args == ["nvidia-ctk", "hook", "create-symlinks", "--link", "/t/lib/a.so.1::/t/lib/a.so",
                      "update-ldcache", "--folder", "/t/lib", *args[7:]]
