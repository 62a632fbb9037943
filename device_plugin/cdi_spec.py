"""The CDI spec the plugin's CDI names resolve in: with `--cdi-root DIR` the plugin writes it itself, as
DIR/nvidia.yaml, by running `nvidia-ctk cdi generate`'s own code for its driver root (kind
nvidia.com/gpu, devices named by index and UUID, `all`), at every start and reload. Without it the host's
spec is used as it is (written by `nvidia-ctk cdi generate`)."""
from __future__ import annotations

import os

from device_plugin.config import Config

SPEC_NAME = "nvidia.yaml"


def refresh_spec(config: Config) -> str | None:
    """Writes the spec when config asks for one; its path, else None. ctk.errors.CliError on failure."""
    if not config.cdi_root or not config.any_cdi():
        return None
    from ctk.cdi_generate_run import generate

    path = os.path.join(config.cdi_root, SPEC_NAME)
    generate(driver_root=config.nvidia_driver_root, output=path, fmt="yaml", strategies=("index", "uuid"),
             vendor="nvidia.com", cls="gpu", no_all_device=False, device_ids=(),
             hook_path=config.nvidia_ctk_path or None)
    return path
