"""The CDI spec the plugin's CDI names resolve in: with `--cdi-root DIR` the plugin writes it itself, as
DIR/nvidia.yaml, by running `nvidia-ctk cdi generate`'s own code for its driver root (kind
nvidia.com/gpu, devices named by index and UUID, `all`), at every start and reload. Without it the host's
spec is used as it is (written by `nvidia-ctk cdi generate`)."""
from __future__ import annotations

import os

from cdi.inventory import Inventory
from device_plugin.config import Config
from device_plugin.resources import Resource

SPEC_NAME = "nvidia.yaml"


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
    generate(driver_root=config.nvidia_driver_root, output=path, fmt="yaml", strategies=("index", "uuid"),
             vendor="nvidia.com", cls="gpu", no_all_device=False, device_ids=spec_device_ids(inventory, resources),
             hook_path=config.nvidia_ctk_path or None)
    return path
