"""jit-cdi mode: the container's edits built in this process from the driver, with no spec file.

The same builder as `nvidia-ctk cdi generate` (cdi.discover), fed with the driver root of the config,
the NVML inventory, the container's own capabilities and the devices it selected, after
NVIDIA_REQUIRE_* is checked against them. So a container gets exactly the files of the capabilities
it asked for, which a generated spec (made once for every container) cannot promise.
"""
from __future__ import annotations

import os

from cdi.config import Config
from cdi.request import DeviceRequest
from cdi.spec import ContainerEdits
from runtime_shim.errors import ShimError

CDI_HOOK = "nvidia-cdi-hook"


def unsupported(request: DeviceRequest) -> str:
    """What of the request this mode cannot give (empty: everything is possible)."""
    if request.mig_config or request.mig_monitor:
        return "NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES"
    if request.imex_channels or request.imex_all:
        return "NVIDIA_IMEX_CHANNELS"
    return ""


def cdi_hook_path(launcher_exe: str | None) -> str | None:
    """nvidia-cdi-hook of this installation: beside the shim's launcher when there is one there."""
    if launcher_exe:
        candidate = os.path.join(os.path.dirname(launcher_exe), CDI_HOOK)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def jit_edits(request: DeviceRequest, config: Config, environ: dict[str, str],
              launcher_exe: str | None = None) -> ContainerEdits:
    from cdi.discover import build_edits
    from cdi.driver_root import resolve_driver_root
    from cdi.nvml import load_inventory
    from cdi.selection import select_and_check

    missing = unsupported(request)
    if missing:
        raise ShimError(f"{missing} cannot be given in jit-cdi mode", request.where or "request")
    root = resolve_driver_root(config_root=config.nvidia_container_cli.root, environ=environ)
    inventory = load_inventory(root)
    selection = select_and_check(request, inventory, config.cdi.default_kind)
    return build_edits(root, inventory, request.capabilities, selection,
                       hook_path=cdi_hook_path(launcher_exe), ldconfig=config.host_ldconfig(),
                       ld_cache=config.nvidia_container_cli.ldcache or None)
