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


class JitRecording:
    """What one jit-cdi create's edits were made of, for its create cache entry (create_cache): the
    NVML transcript (cdi.nvml.load_inventory), every answer the driver root gave while it was searched
    (cdi.driver_files_cache.RecordingRoot: the edits are a function of them), and the files looked at
    outside it: the host device nodes the edits name, the hook, the root's marker of a simulated host,
    the driver's params file and, for the loader's search of NVML under "/", /etc/ld.so.cache."""

    def __init__(self) -> None:
        self.transcript: list[str] = []
        self.root = None          # the RecordingRoot searched
        self.hook_path: str | None = None
        # Not kept: a request for graphics or display (its DRM nodes come from a sysfs listing no answer
        # stands for), and edits made without the hook beside the launcher (discover.default_hook_path
        # then looks in places no check covers)
        self.keepable = True

    def watch(self, root):
        from cdi.driver_files_cache import RecordingRoot

        self.root = RecordingRoot(root.path)
        return self.root

    def answers(self) -> list | None:
        """The root's answers, if they may be kept (cdi.driver_files_cache.settled_answers)."""
        from cdi.driver_files_cache import settled_answers

        return settled_answers(self.root) if self.keepable else None

    def stat_paths(self, edits: ContainerEdits) -> list[str]:
        from cdi.discover import driver_params_path
        from cdi.driver_root import SIMULATED_HOST_MARKER

        root = self.root
        paths = [n.host_path or n.path for n in edits.device_nodes]
        if self.hook_path:
            paths.append(self.hook_path)
        if root.path == "/":
            paths.append("/etc/ld.so.cache")
        else:
            paths.append(os.path.join(root.path, SIMULATED_HOST_MARKER))
        paths.append(driver_params_path(root))
        return paths

    def nvml_lines(self, helper: str, timeout: float) -> list[str] | None:
        """The entry's lines that let the launcher read NVML again (gct-nvml-inventory) and compare."""
        from cdi.nvml import MIG_MINORS, loaded_library

        library = loaded_library(self.root)
        if library is None:
            return None
        return [f"nvml-helper {helper}", f"nvml-library {library}",
                f"nvml-mig-minors {self.root.proc_path(MIG_MINORS)}", f"nvml-timeout {timeout:f}",
                *(f"inventory {line}" for line in self.transcript)]


def jit_edits(request: DeviceRequest, config: Config, environ: dict[str, str],
              launcher_exe: str | None = None, recording: JitRecording | None = None) -> ContainerEdits:
    """The edits of the request, built from the driver now. recording: filled with what they were made of."""
    from cdi.discover import GRAPHICS_CAPABILITIES, build_edits
    from cdi.driver_root import resolve_driver_root
    from cdi.nvml import load_inventory
    from cdi.selection import select_and_check

    missing = unsupported(request)
    if missing:
        raise ShimError(f"{missing} cannot be given in jit-cdi mode", request.where or "request")
    root = resolve_driver_root(config_root=config.nvidia_container_cli.root, environ=environ)
    hook_path = cdi_hook_path(launcher_exe)
    if recording is not None:
        root = recording.watch(root)
        recording.hook_path = hook_path
        recording.keepable = hook_path is not None and not request.capabilities & GRAPHICS_CAPABILITIES
    # NVML read by the gct-nvml-inventory of the launcher's installation (its libexec/): the one the
    # cached path will run again
    inventory = load_inventory(root, recording.transcript if recording is not None else None,
                               os.path.dirname(launcher_exe) if launcher_exe else None)
    selection = select_and_check(request, inventory, config.cdi.default_kind)
    return build_edits(root, inventory, request.capabilities, selection,
                       hook_path=hook_path, ldconfig=config.host_ldconfig(),
                       ld_cache=config.nvidia_container_cli.ldcache or None)
