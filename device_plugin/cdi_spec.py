"""The CDI spec the plugin's CDI names resolve in: with `--cdi-root DIR` the plugin writes it itself, as
DIR/nvidia.yaml, by running `nvidia-ctk cdi generate`'s own code for its driver root (kind
nvidia.com/gpu, devices named by index and UUID, `all`), at every start and reload. Without it the host's
spec is used as it is (written by `nvidia-ctk cdi generate`).

In a container (`--container-driver-root`, e.g. /driver-root, where the node's driver root
`--nvidia-driver-root` is mounted) the driver is read at the mount, and the spec is then made to name
the node's paths (cdi.transform_root): containerd or CRI-O apply it on the node, where /driver-root does
not exist. Its hook is then the node's: `--nvidia-ctk-path` (default /usr/bin/nvidia-cdi-hook, where the
toolkit's packages put it) is a path on the node (when the mount is the node's /, the file is looked
at through it to tell our hook from NVIDIA's)."""
from __future__ import annotations

import os

from cdi.inventory import Inventory
from device_plugin.config import Config
from device_plugin.resources import Resource

SPEC_NAME = "nvidia.yaml"
NODE_HOOK_PATH = "/usr/bin/nvidia-cdi-hook"   # the packages' (docs/packaging.md)


def spec_device_ids(inventory: Inventory, resources: list[Resource]) -> tuple[str, ...]:
    """The `--device-id`s of the spec: none (the default: every GPU not in MIG mode and every MIG
    device), unless a GPU in MIG mode is offered whole (mig-strategy none): then every device the
    default holds and those GPUs, so that each CDI name the plugin hands out is a device of the spec
    (`nvidia-ctk cdi generate --device-id 1 ...` names such a GPU the same way)."""
    whole_mig_gpus = {d.index for r in resources for d in r.devices
                      if d.mig is None and any(g.mig_enabled and str(g.index) == d.index for g in inventory.gpus)}
    if not whole_mig_gpus:
        return ()
    default = [str(g.index) for g in inventory.gpus if not g.mig_enabled]
    default += [f"{g.index}:{m.index}" for g in inventory.gpus if g.mig_enabled for m in g.mig_devices]
    return tuple(default + sorted(whole_mig_gpus, key=int))


def refresh_spec(config: Config, inventory: Inventory, resources: list[Resource]) -> str | None:
    """Writes the spec when config asks for one; its path, else None. ctk.errors.CliError on failure."""
    if not config.cdi_root:
        return None
    from ctk.cdi_generate_run import generate

    path = os.path.join(config.cdi_root, SPEC_NAME)
    hook_path, transform = config.nvidia_ctk_path or None, None
    if config.container_driver_root:
        from cdi.transform_root import transform_root

        node_root = config.nvidia_driver_root
        hook_path = hook_path or NODE_HOOK_PATH
        if os.path.normpath(node_root) == "/":
            # the node's hook seen through the mount of its /, so that its kind (ours or NVIDIA's) is read
            # from the file itself; the transform below names it by its path on the node again
            hook_path = os.path.join(config.container_driver_root, hook_path.lstrip("/"))

        def transform(spec, read_root):
            transform_root(spec, read_root, node_root)
    generate(driver_root=config.local_driver_root, output=path, fmt="yaml", strategies=("index", "uuid"),
             vendor="nvidia.com", cls="gpu", no_all_device=False, device_ids=spec_device_ids(inventory, resources),
             hook_path=hook_path, transform=transform)
    return path
