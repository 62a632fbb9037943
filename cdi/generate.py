"""A CDI spec for the GPUs of a host: the edits of cdi.discover, named and serialised.

    spec = generate_spec(driver_root, inventory, strategies=("index", "uuid"))

Devices are named as users know them (`0`, `1:0`, `GPU-...`, `MIG-...`, `all`); the spec's own
containerEdits are the common edits (control nodes, driver files, env, the nvidia-cdi-hook entry).
cdiVersion is left to the writer, which emits the oldest version the content needs (0.5.0 for device
nodes with hostPath or names starting with a digit; podman 4.3 accepts nothing newer).
"""
from __future__ import annotations

from collections.abc import Iterable

from cdi.discover import NVIDIAS, OURS, EditsBuilder, build_spec_devices, hook_flavour_of
from cdi.driver_files import ALL_CAPABILITIES
from cdi.driver_root import DriverRoot
from cdi.errors import CdiError
from cdi.inventory import Gpu, Inventory, MigDevice
from cdi.qualified_name import parse_kind
from cdi.spec import Spec

DEFAULT_VENDOR = "nvidia.com"
DEFAULT_CLASS = "gpu"
DEFAULT_STRATEGIES = ("index", "uuid")
# Everything but 32-bit libraries, as NVIDIA's generator does: a spec serves every container of the
# host, and 32-bit libraries would land in folders most images do not search.
GENERATE_CAPABILITIES = tuple(c for c in ALL_CAPABILITIES if c != "compat32")


class GenerateError(CdiError):
    """A spec cannot be generated: bad kind, unknown device id, no GPU."""


def select_generate_devices(inventory: Inventory, device_ids: Iterable[str] = ()) -> list[Gpu | MigDevice]:
    """The devices a spec describes: what `all` means (Inventory.all_devices: every GPU not in MIG
    mode, then every MIG device), or just those named by `device_ids` (any form a user knows: 0, 1:0,
    GPU-.., MIG-.., PCI bus id, all)."""
    ids = [i.strip() for i in device_ids if i.strip()]
    if not ids:
        return inventory.all_devices()
    from cdi.request import DeviceRequest, check_device_id
    from cdi.selection import select_devices

    checked = tuple(check_device_id(i, "--device-id") for i in ids)
    selection = select_devices(DeviceRequest(source="cli", where="--device-id", devices=checked,
                                             is_gpu_container=True), inventory)
    return list(selection.gpus) + list(selection.mig_devices)


def generate_spec(driver_root: DriverRoot | str, inventory: Inventory, *, vendor: str = DEFAULT_VENDOR,
                  cls: str = DEFAULT_CLASS, strategies: Iterable[str] = DEFAULT_STRATEGIES,
                  all_device: bool = True, device_ids: Iterable[str] = (), hook_path: str | None = None,
                  ldconfig: str | None = None, ld_cache: str | None = None,
                  capabilities: Iterable[str] = GENERATE_CAPABILITIES,
                  builder: EditsBuilder | None = None, disabled_hooks: Iterable[str] = ()) -> Spec:
    """The spec (cdiVersion unset: the writer fills in the oldest one that fits). `ldconfig`: the host
    ldconfig the hook runs; `ld_cache`: the driver root's ld.so.cache path (config `ldcache`).
    `hook_path` may be NVIDIA's nvidia-cdi-hook (or nvidia-ctk): the spec then carries one hook entry
    per subcommand in NVIDIA's spelling, which that program reads (ours takes one chain).
    `disabled_hooks`: hook subcommands left out (cdi.discover.ALL_HOOKS: no hook entry)."""
    kind = f"{vendor}/{cls}"
    parse_kind(kind)  # InvalidNameError (a CdiError) names the broken rule
    flavour = hook_flavour_of(hook_path) if hook_path else OURS
    if flavour == NVIDIAS:
        from cdi.log import get_logger

        get_logger(__name__).warning("%s is not this toolkit's nvidia-cdi-hook: writing NVIDIA's hook "
                                     "entries, one process per subcommand", hook_path)
    builder = builder or EditsBuilder(driver_root, inventory, capabilities, hook_path=hook_path,
                                      ldconfig=ldconfig, ld_cache=ld_cache or None, hook_flavour=flavour,
                                      disabled_hooks=disabled_hooks)
    devices = build_spec_devices(builder, select_generate_devices(inventory, device_ids),
                                 list(strategies) or list(DEFAULT_STRATEGIES), all_device)
    if not devices:
        raise GenerateError("no GPUs to describe", f"driver root {builder.root.path}")
    return Spec(version=None, kind=kind, devices=devices, container_edits=builder.common_edits())
