"""`nvidia-container-cli configure`: the command line's front door to the injector (hook.inject).

    nvidia-container-cli --load-kmods configure --device=0 --compute --utility --pid=4242 /run/.../rootfs

The flags become the same request the prestart hook reads from a container's environment: device ids
(through the shared resolver, cdi.selection), capabilities, `--require` checked against the selected
GPUs (cdi.require), MIG config/monitor and IMEX channels. The plan and the injection are hook.inject's;
this module only translates flags and filters what the flags exclude:

- `--pid`: inject into that process's mount namespace and cgroup. Without it (LXC's mount hook, enroot)
  the rootfs is taken in this process's own mount namespace; there is then no container cgroup to
  find, so device cgroups need `--no-cgroups`, which those callers pass.
- `--no-cgroups` (or config `no-cgroups`): device cgroups are left alone.
- `--no-devbind`: device nodes are not bind-mounted (the caller makes them), but still allowed in the
  device cgroup.
- `--no-persistenced`, `--no-fabricmanager`, `--no-gsp-firmware`: those sockets / firmware are not mounted.
- `--ldconfig=@PATH` runs the host's PATH; a path without "@" names the image's own ldconfig and is
  refused, with or without config `features.allow-ldconfig-from-container` (cdi.config.ldconfig_host_path
  says why).
- `--user[=UID:GID]`: the caller has no host privileges (LXC's unprivileged containers run the tool in
  a user namespace). What the namespace allows (bind mounts and links in a mount namespace it owns,
  ldconfig in the sandbox) is done; what it refuses fails with one line naming the step, after every
  mount made is undone. Asking for device cgroups there is refused up front: the kernel lets only the
  initial user namespace change them, and a half-done injection is worse than a clear error.
- Files missing for a requested capability are not an error (ctr asks for every capability).
"""
from __future__ import annotations

import os
import stat
import sys

from cdi.errors import message_line, what_where
from cdi.log import get_logger
from hook.cli_args import PROG

log = get_logger(__name__)

PERSISTENCED_SOCKETS = ("/var/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket")
FABRICMANAGER_SOCKETS = ("/var/run/nvidia-fabricmanager/socket", "/run/nvidia-fabricmanager/socket")
FIRMWARE_PREFIX = "/lib/firmware/nvidia/"
ALLOW_CONTAINER_LDCONFIG = "allow-ldconfig-from-container"


class ConfigureError(Exception):
    def __init__(self, what: str, where: str | None = None):
        super().__init__(what_where(what, where))
        self.what, self.where = what, where


def capabilities_of(args) -> frozenset[str]:
    """The capability flags given; none at all means device nodes (and firmware) only, as in the real tool."""
    return frozenset(c for c in ("compute", "utility", "video", "graphics", "display", "ngx", "compat32")
                     if getattr(args, c))


def select_from_flags(args, inventory):
    """The cdi.selection.Selection of `--device` values (repeatable comma lists), requirements checked."""
    from cdi.request import DeviceRequest, parse_device_ids
    from cdi.require import check_requirements, parse_requirement
    from cdi.selection import Selection, select_devices

    ids: list[str] = []
    for value in args.device:
        ids += [i for i in parse_device_ids(value, "--device") if i not in ids]
    if ids and ids != ["none"]:
        selection = select_devices(DeviceRequest(source="cli", where="--device", devices=tuple(ids),
                                                 is_gpu_container=True), inventory)
    else:
        selection = Selection()
    requirements = [r for r in (parse_requirement("--require", e) for e in args.require) if r is not None]
    check_requirements(requirements, inventory, selection.all_gpus(inventory))
    return selection


def extra_ids(values: list[str], option: str, inventory) -> tuple[str, ...]:
    """--mig-config / --mig-monitor ids, checked here so an error names the flag."""
    if not values:
        return ()   # the usual case: hook.cli_info (and the re it compiles patterns with) is not imported
    from cdi.request import parse_device_ids
    from hook.cli_info import resolve_ids

    resolve_ids(values, inventory, option)   # an id that names no GPU fails here
    return tuple(dict.fromkeys(i for value in values for i in parse_device_ids(value, option)))


def imex_from_flags(values: list[str]) -> tuple[tuple[int, ...], bool]:
    from cdi.request import parse_imex_channels

    channels: list[int] = []
    every = False
    for value in values:
        found, all_channels = parse_imex_channels(value)
        every |= all_channels
        channels += [c for c in found if c not in channels]
    return tuple(channels), every


def host_ldconfig(args, config) -> str:
    """The ldconfig binary to run, a host path: "@PATH" is the host's; a container path is refused
    (cdi.config.ldconfig_host_path says why)."""
    from cdi.config import ldconfig_host_path

    value = args.ldconfig or config.nvidia_container_cli.ldconfig or "@/sbin/ldconfig"
    where = "--ldconfig" if args.ldconfig else "nvidia-container-cli.ldconfig"
    path = ldconfig_host_path(value, config.feature(ALLOW_CONTAINER_LDCONFIG), where)
    if not os.path.isabs(path):
        raise ConfigureError(f"ldconfig {value!r} must be an absolute host path", where)
    # checked before anything is mounted: a missing ldconfig would otherwise fail only after the
    # mounts, and cost a rollback
    try:
        st = os.stat(path)
    except OSError as e:
        raise ConfigureError(f"cannot use ldconfig: {e.strerror}", path) from None
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
        raise ConfigureError("cannot use ldconfig: not an executable file", path)
    return path


def drop_excluded_files(plan, args) -> None:
    """Remove the mounts the --no-* flags exclude from the plan (a plain data object)."""
    excluded = []
    if args.no_persistenced:
        excluded += PERSISTENCED_SOCKETS
    if args.no_fabricmanager:
        excluded += FABRICMANAGER_SOCKETS
    plan.edits.mounts = [m for m in plan.mounts
                         if m.container_path not in excluded
                         and not (args.no_gsp_firmware and m.container_path.startswith(FIRMWARE_PREFIX))]


def in_user_namespace() -> bool:
    """True when this process is not in the initial user namespace (uid_map is not the identity)."""
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return True


def configure(args, config, driver_root) -> None:
    from cdi.config import kept_config_dir
    from cdi.nvml import load_inventory
    from hook.inject import Target, inject, plan_injection

    cgroups = not (args.no_cgroups or config.nvidia_container_cli.no_cgroups)
    rootfs = os.path.abspath(args.rootfs)
    if cgroups and args.pid is None:
        raise ConfigureError("device cgroups need the container's process: pass --pid, or --no-cgroups when "
                             "the caller manages the cgroup", "configure")
    if cgroups and args.user is not None and in_user_namespace():
        raise ConfigureError("device cgroups cannot be changed from a user namespace: pass --no-cgroups", "--user")
    if args.user is not None:
        log.debug("running without host privileges as %d:%d", *args.user)

    inventory = load_inventory(driver_root)
    selection = select_from_flags(args, inventory)
    mig_config = extra_ids(args.mig_config, "--mig-config", inventory)
    mig_monitor = extra_ids(args.mig_monitor, "--mig-monitor", inventory)
    imex_channels, imex_all = imex_from_flags(args.imex_channel)
    ld_cache = args.ldcache or config.nvidia_container_cli.ldcache or None
    ldconfig = host_ldconfig(args, config)
    # the driver files found are kept beside the parsed config, as the prestart hook keeps them
    # (cdi.driver_files_cache: used while every path looked at answers an lstat the same)
    plan = plan_injection(driver_root, inventory, selection, capabilities_of(args),
                          mig_config=mig_config, mig_monitor=mig_monitor, imex_channels=imex_channels,
                          imex_all=imex_all, ldconfig=ldconfig, ld_cache=ld_cache, cache_dir=kept_config_dir())
    drop_excluded_files(plan, args)
    target = Target(rootfs, args.pid, cgroups=cgroups, bind_devices=not args.no_devbind)
    injected = inject(plan, target, warn=_warn)
    log.debug("injected into %s: %r", rootfs, injected)


def _warn(message: str) -> None:
    print(message_line(PROG, "warning", message), file=sys.stderr)
