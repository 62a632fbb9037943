"""Which mode edits a container's spec, and the edits each mode makes.

- `cdi`: the requested devices are looked up in the CDI spec dirs (bare ids get the default kind) and
  applied with CDI's exact semantics (cdi.registry / cdi.apply); an unknown name fails the create and
  changes nothing.
- `jit-cdi`: the same edits, built in this process from the driver (cdi.discover), no spec file needed.
- `legacy`: our prestart hook is added and does the work when the container starts.
- `auto` (the default) takes the fastest mode that is exact for this host and request:
    1. CDI names (annotations, or qualified names like `nvidia.com/gpu=1:1` in the env): `cdi`, since
       only spec dirs define such names;
    2. bare ids (`1`, `GPU-..`, `MIG-..`, `1:0`, `all`): `cdi` when the spec dirs define every one of
       them under the default kind and the request asks for nothing a spec made in advance cannot
       decide: capabilities within those `nvidia-ctk cdi generate` writes (all but compat32), no
       NVIDIA_REQUIRE_* to check (or checks disabled), not `none` (driver files without a GPU);
    3. otherwise `jit-cdi`, which reads the driver and the inventory for this very request;
    4. `legacy` when the request needs what jit-cdi cannot give (MIG config/monitor devices, IMEX
       channels) or this installation has no jit-cdi discovery.
  The program names `nvidia-container-runtime.cdi` and `.legacy` force their mode whatever the config.

In `cdi` and `jit-cdi` modes the devices are in the spec before the container starts, so a
`nvidia-container-runtime-hook` prestart hook (e.g. the one `docker --gpus` adds) would inject a second
time: it is removed.
"""
from __future__ import annotations

import os

from cdi.config import Config
from cdi.errors import RequestError
from cdi.request import ALL_CAPABILITIES, DeviceRequest, classify_id
from runtime_shim.errors import ShimError
from runtime_shim.runtime_cache import HOOK_ENV_KEYS
from runtime_shim.shim_log import log


HOOK_NAME = "nvidia-container-runtime-hook"
HOOK_ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROGRAM_MODES = {"nvidia-container-runtime.cdi": "cdi", "nvidia-container-runtime.legacy": "legacy"}


def forced_mode(program: str) -> str | None:
    return PROGRAM_MODES.get(os.path.basename(program))


def jit_cdi_available() -> bool:
    import importlib.util  # ~1 ms, and only the auto rule asks

    return importlib.util.find_spec("cdi.discover") is not None


# What `nvidia-ctk cdi generate` puts in a spec (cdi.generate.GENERATE_CAPABILITIES; a test keeps the
# two equal): spelled out here so the start path does not import the generator.
GENERATED_CAPABILITIES = frozenset(ALL_CAPABILITIES - {"compat32"})


def static_spec_suffices(request: DeviceRequest) -> bool:
    """Whether a spec written before this request (by `cdi generate`) gives it all it asks."""
    needs_checks = bool(request.requirements) and not request.disable_require
    return (bool(request.devices) and request.capabilities <= GENERATED_CAPABILITIES and not needs_checks
            and not request.mig_config and not request.mig_monitor
            and not request.imex_channels and not request.imex_all)


def choose_mode(configured: str, request: DeviceRequest, config: Config, registry_factory) -> str:
    """The mode for this request; registry_factory() opens the spec dirs (only when needed)."""
    if configured != "auto":
        return configured
    names = request.cdi_device_names(config.cdi.default_kind)
    if request.source == "annotation" or any(classify_id(d) == "cdi" for d in request.devices):
        return "cdi"
    if static_spec_suffices(request):
        registry = registry_factory()
        if all(name in registry.devices for name in names):
            return "cdi"
    from runtime_shim.jit_cdi import unsupported

    return "jit-cdi" if jit_cdi_available() and not unsupported(request) else "legacy"


def _is_nvidia_hook(hook: dict) -> bool:
    args = hook.get("args") or []
    return (os.path.basename(str(hook.get("path") or "")) == HOOK_NAME
            or bool(args) and os.path.basename(str(args[0])) == HOOK_NAME)


def drop_legacy_hooks(oci: dict) -> dict:
    hooks = oci.get("hooks")
    if not isinstance(hooks, dict) or not isinstance(hooks.get("prestart"), list):
        return oci
    kept = [h for h in hooks["prestart"] if not (isinstance(h, dict) and _is_nvidia_hook(h))]
    if len(kept) != len(hooks["prestart"]):
        log.info("removed the %s prestart hook: the devices are injected by CDI edits", HOOK_NAME)
        hooks["prestart"] = kept
        if not kept:
            del hooks["prestart"]
    return oci


def cdi_edits(request: DeviceRequest, config: Config, registry):
    """The CDI edits of the request: its devices' from the spec dirs (bare ids get the default kind)."""
    kind = config.cdi.default_kind
    if request.devices:
        return registry.edits_for(request.cdi_device_names(kind))
    # "none": the driver files without any GPU, i.e. the common edits of the generated spec
    everything = registry.devices.get(f"{kind}=all")
    if everything is None:
        raise RequestError(f"NVIDIA_VISIBLE_DEVICES=none needs a spec defining {kind}=all",
                           "spec dirs " + ", ".join(registry.spec_dirs))
    return everything.spec.container_edits


def apply_edits(oci: dict, edits) -> dict:
    """cdi.apply.apply_edits, imported only when a mode applies edits."""
    from cdi.apply import apply_edits as apply

    return apply(oci, edits)


def find_hook(config: Config, environ: dict[str, str], launcher_exe: str | None) -> str:
    """The prestart hook program: config `nvidia-container-runtime-hook.path`; a bare name is looked
    for beside this shim first (the same installation), then in the caller's PATH."""
    configured = config.nvidia_container_runtime_hook.path or HOOK_NAME
    if "/" in configured:
        candidates = [os.path.abspath(configured)]
    else:
        dirs = [os.path.dirname(launcher_exe)] if launcher_exe else []
        dirs += (environ.get("PATH") or "").split(os.pathsep)
        candidates = [os.path.join(d, configured) for d in dirs if d]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise ShimError(f"the prestart hook {configured} was not found", "nvidia-container-runtime-hook.path")


def legacy_hook_entry(hook_path: str, environ: dict[str, str]) -> dict:
    """Our prestart hook; its env is never empty (an empty one is dropped by engines and the image's
    environment reaches the hook) and names the config this shim read and NVML's time limit."""
    env = [HOOK_ENV_PATH] + [f"{k}={environ[k]}" for k in HOOK_ENV_KEYS if environ.get(k)]
    return {"path": hook_path, "args": [HOOK_NAME, "prestart"], "env": env}


def apply_legacy(oci: dict, hook_path: str, environ: dict[str, str]) -> dict:
    hooks = oci.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise ShimError("hooks in the OCI spec is not an object", "config.json")
    prestart = (hooks or {}).get("prestart") or []
    if any(isinstance(h, dict) and _is_nvidia_hook(h) for h in prestart):
        log.info("the %s prestart hook is there already", HOOK_NAME)
        return oci
    result = dict(oci)
    result["hooks"] = dict(hooks or {})
    result["hooks"]["prestart"] = [*prestart, legacy_hook_entry(hook_path, environ)]
    return result
