"""Every CDI name the plugin can hand out is a device of the spec it writes (--cdi-root), per MIG strategy
and id strategy, on a host with a GPU in MIG mode; without such a GPU offered whole, the spec is exactly
`nvidia-ctk cdi generate`'s default."""
import pytest

from cdi.generate import generate_spec
from device_plugin.allocate import cdi_name
from device_plugin.cdi_spec import spec_device_ids
from device_plugin.resources import build_resources


@pytest.mark.parametrize("mig_strategy", ["none", "mixed"])
def test_every_name_handed_out_is_in_the_spec(sim_hosts, mig_strategy):
    root, inventory = sim_hosts["mig-one"]
    resources = build_resources(inventory, mig_strategy)
    ids = spec_device_ids(inventory, resources)
    spec = generate_spec(str(root), inventory, device_ids=ids)
    names = {f"{spec.kind}={d.name}" for d in spec.devices}
    for resource in resources:
        for device in resource.devices:
            for strategy in ("uuid", "index"):
                assert cdi_name(device.device_id(strategy)) in names
    if mig_strategy == "mixed":
        assert ids == ()   # the default spec
    else:
        assert ids == ("0", "1:0", "1:1", "1")


def _host_paths(spec):
    """Every path of the spec the runtime opens on the node: hostPaths, hook paths and hook arguments."""
    edits = [spec.container_edits] + [d.container_edits for d in spec.devices]
    paths = [n.host_path or n.path for e in edits for n in e.device_nodes]
    paths += [m.host_path for e in edits for m in e.mounts]
    paths += [h.path for e in edits for h in e.hooks] + [a for e in edits for h in e.hooks for a in h.args]
    return paths


@pytest.mark.parametrize("node_root", ["/", "/run/nvidia/driver"])
def test_in_a_container_the_spec_names_the_nodes_paths(sim_hosts, tmp_path, node_root):
    """The DaemonSet's way (packaging/kubernetes): the node's driver root mounted at --container-driver-root,
    read there; the spec containerd applies on the node names the node's paths, never the mount's."""
    from cdi.spec import Spec
    from cdi.spec_file import parse_spec_text
    from device_plugin.cdi_spec import refresh_spec
    from device_plugin.config import resolve
    from device_plugin.main import parse_args

    mount, inventory = sim_hosts["mig-one"]   # the simulated host stands for the mount of the node's root
    _, given = parse_args(["--nvidia-driver-root", node_root, "--container-driver-root", str(mount),
                           "--cdi-root", str(tmp_path / "cdi"), "--mig-strategy", "mixed"])
    config = resolve(given, {})
    assert config.local_driver_root == str(mount)
    path = refresh_spec(config, inventory, build_resources(inventory, "mixed"))
    spec = Spec.from_dict(parse_spec_text(open(path).read(), path))
    paths = _host_paths(spec)
    assert not [p for p in paths if str(mount) in p]
    under = node_root.rstrip("/")
    assert f"{under}/dev/nvidia0" in paths and f"{under}/dev/nvidiactl" in paths
    assert f"{under}/proc/driver/nvidia/params" in paths
    assert any(p.startswith(f"{under}/usr/lib/x86_64-linux-gnu/libcuda.so.") for p in paths)
    [hook] = {h.path for e in [spec.container_edits] + [d.container_edits for d in spec.devices] for h in e.hooks}
    assert hook == "/usr/bin/nvidia-cdi-hook"   # the node's, from the packages
    # the same spec with the mount's paths, as the host's own generate writes for that root
    plain = generate_spec(str(mount), inventory)
    assert len(_host_paths(plain)) == len(paths) and any(str(mount) in p for p in _host_paths(plain))

