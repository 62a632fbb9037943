"""The one edits builder: what a container needs for its GPUs, as CDI container edits.

    builder = EditsBuilder(driver_root, inventory, {"compute", "utility"}, hook_path=default_hook_path())
    builder.device_edits(gpu)          # /dev/nvidia<minor>
    builder.device_edits(mig)          # parent's /dev/nvidia<minor> + its GI and CI cap nodes
    builder.common_edits()             # control nodes, driver files, env, the nvidia-cdi-hook entry
    build_edits(root, inv, caps, selection, hook_path=...)   # all of it for one resolved request

Every consumer goes through here: `nvidia-ctk cdi generate` serialises these edits into a spec, the
runtime shim (jit-cdi mode) merges them into config.json, and the prestart hook applies them live
(running the nvidia-cdi-hook entry in-process through hook.cdi_hook). Nothing is computed twice.

Decisions:
- Libraries are mounted at their path inside the driver root (the host's layout, as NVIDIA's tool
  does): a spec cannot know at generate time whether a container is Debian-like. The hook entry passes
  each library folder to `update-ldcache --folder`, so ldconfig finds them in any rootfs.
- Device nodes carry hostPath (when it differs from the container path: a simulated host's
  <root>/dev/nvidia0 becomes /dev/nvidia0) and type/major/minor read from the host node, so a consumer
  needs no stat of its own and the device-cgroup rule is exact.
- A missing GPU or MIG capability node is an error (the device would not work); a missing
  nvidia-uvm, nvidia-uvm-tools, nvidia-modeset or DRM node is only logged (created on demand on
  real hosts). With graphics or display, a GPU also gets its DRM nodes (/dev/dri/card<N>,
  renderD<N>, as sysfs lists them for its PCI device); the /dev/dri/by-path links NVIDIA's tool adds
  through a per-device hook are left out, to keep one hook process per container.
- The common edits set NVIDIA_VISIBLE_DEVICES=void, so a prestart hook configured alongside the CDI
  path sees no GPU request and does not inject a second time.
"""
from __future__ import annotations

import os
import posixpath
import stat
import sys

from cdi.driver_files import (BINARY, FIRMWARE, IPC_SOCKET, LIBRARY, LIBRARY32, MPS_DIR, DriverFiles,
                              DriverFilesError, locate_driver_files, parse_capabilities)
from cdi.driver_root import DriverRoot
from cdi.errors import CdiError
from cdi.inventory import Gpu, Inventory, MigDevice
from cdi.log import get_logger
from cdi.record import Record, deep_copy
from cdi.spec import ContainerEdits, Device, DeviceNode, Hook, Mount

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (or collections, for one name)
if TYPE_CHECKING:
    from collections.abc import Iterable

log = get_logger(__name__)  # imports logging only when a message can be shown

HOOK_PROGRAM = "nvidia-cdi-hook"
DEFAULT_HOOK_PATH = "/usr/bin/nvidia-cdi-hook"
# A hook's environment is exactly its env list; an empty one is dropped by engines and the image's
# environment leaks in (docs/reference.md#hook-env). The hook needs nothing else: all it does is in its args.
HOOK_ENV = ("PATH=/usr/sbin:/usr/bin:/sbin:/bin",)
# Our hook entry runs at createRuntime and joins the container's mount namespace itself: runc 1.1
# hands a createContainer hook its state several milliseconds late (docs/runtime-shim.md). NVIDIA's
# nvidia-cdi-hook works only where it is started, so its entries stay createContainer hooks.
CREATE_RUNTIME, CREATE_CONTAINER = "createRuntime", "createContainer"
CREATE_SYMLINKS, UPDATE_LDCACHE = "create-symlinks", "update-ldcache"
ENABLE_CUDA_COMPAT, DISABLE_DEVICE_NODE_MODIFICATION = "enable-cuda-compat", "disable-device-node-modification"
# NVIDIA 1.20's: EGL and Vulkan in the container see only its GPUs (an application profile naming them,
# docs/reference.md#application-profiles). Only in our own chain: an older NVIDIA hook refuses the
# subcommand, and the spec cannot tell which NVIDIA version will run it.
UPDATE_APPLICATION_PROFILE = "update-application-profile"
HOOK_SUBCOMMANDS = (CREATE_SYMLINKS, ENABLE_CUDA_COMPAT, UPDATE_LDCACHE, DISABLE_DEVICE_NODE_MODIFICATION,
                    UPDATE_APPLICATION_PROFILE)
ALL_HOOKS = "all"   # `--disable-hook all`: no hook entry at all, as NVIDIA's tool takes it
DEFAULT_LDCONFIG = "/sbin/ldconfig"
DRIVER_PARAMS = "/proc/driver/nvidia/params"
# Where libcuda is in the container, for programs that look for the driver's libcuda (NVIDIA's specs
# set it too).
LIBCUDA_DIR_ENV = "NVIDIA_CTK_LIBCUDA_DIR"
LIBCUDA_SONAME = "libcuda.so.1"
OURS, NVIDIAS = "ours", "nvidia"

VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"
CONTROL_NODE = "nvidiactl"
# Control nodes per capability (docs/reference.md#device-nodes): uvm only with compute, modeset only with display.
CAPABILITY_NODES = {"compute": ("nvidia-uvm", "nvidia-uvm-tools"), "display": ("nvidia-modeset",)}
MIG_CAP_DIR = "nvidia-caps"
DRI_DIR = "dri"
# DRM nodes (/dev/dri/card*, renderD*) go with a GPU when a container asks for graphics or display.
GRAPHICS_CAPABILITIES = frozenset({"graphics", "display"})

# How devices are named in a spec (`--device-name-strategy`): `0` / `1:0`, `GPU-..` / `MIG-..`,
# `gpu0` / `mig1:0`. The "all" device holds every device's nodes.
NAME_STRATEGIES = ("index", "uuid", "type-index")
ALL_DEVICE = "all"

# Mount options per kind of driver file. Libraries and binaries must stay executable (never
# noexec); nothing from the driver is setuid or a device. rprivate, as NVIDIA's specs: nothing
# mounted on or below them propagates back to the host, whatever the container's root propagation.
# bind, not NVIDIA's rbind: a driver file or folder has no submounts to carry, and whatever the host
# mounts below a driver folder (the MPS directory) stays out of containers.
READ_ONLY_BIND = ("ro", "nosuid", "nodev", "bind", "rprivate")
WRITABLE_BIND = ("nosuid", "nodev", "noexec", "bind", "rprivate")
MOUNT_OPTIONS = {LIBRARY: READ_ONLY_BIND, LIBRARY32: READ_ONLY_BIND, BINARY: READ_ONLY_BIND,
                 FIRMWARE: READ_ONLY_BIND, IPC_SOCKET: WRITABLE_BIND, MPS_DIR: WRITABLE_BIND}


class DiscoveryError(CdiError):
    """The edits for a device or the driver files cannot be built (missing node, bad root)."""


def sysfs_bus_id(pci_bus_id: str) -> str:
    """NVML's "00000000:07:00.0" as sysfs spells it: "0000:07:00.0"."""
    parts = pci_bus_id.lower().split(":")
    if len(parts) == 3 and all(c in "0123456789abcdef" for c in parts[0]) and parts[0]:
        parts[0] = f"{int(parts[0], 16):04x}"
    name = ":".join(parts)
    if "/" in name or name in ("", ".", ".."):
        raise DiscoveryError(f"invalid PCI bus id {pci_bus_id!r}")
    return name


def default_hook_path(argv0: str | None = None) -> str:
    """nvidia-cdi-hook next to the running program (argv[0], then the interpreter: a venv or
    /usr/bin), else /usr/bin/nvidia-cdi-hook."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    dirs = []
    if argv0 and "/" in argv0:
        dirs.append(os.path.dirname(os.path.abspath(argv0)))
    if sys.executable:
        dirs.append(os.path.dirname(sys.executable))
    for directory in dirs:
        candidate = os.path.join(directory, HOOK_PROGRAM)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return DEFAULT_HOOK_PATH


def driver_params_path(root: DriverRoot) -> str:
    """The driver's params file as the root has it (its proc), which disable-device-node-modification
    copies: the host's /proc/driver/nvidia/params, or a driver root's (a simulated host's own proc)."""
    return root.proc_path(DRIVER_PARAMS[len("/proc/"):])


def hook_flavour_of(path: str) -> str:
    """OURS when the file at path is one of our launchers (nvidia-cdi-hook or nvidia-ctk: the launcher
    note, cdi.launcher_identity) or cannot be opened (a spec may be written before the package is
    installed); NVIDIAS when it is another program (NVIDIA's nvidia-cdi-hook or nvidia-ctk, or anything
    but a regular file), whose subcommands take one entry each."""
    from cdi.launcher_identity import is_launcher_fd

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)   # a FIFO there must not hang us
    except OSError:
        return OURS
    try:
        return OURS if is_launcher_fd(fd) else NVIDIAS
    finally:
        os.close(fd)


def hook_args(links: Iterable[tuple[str, str]], folders: Iterable[str], ldconfig: str | None = None, *,
              host_driver_version: str | None = None, params_file: str | None = None,
              disabled: frozenset[str] = frozenset()) -> list[str]:
    """The argv of our one hook entry: `create-symlinks --link TARGET::LINK ...`, `update-ldcache
    --folder DIR ... [--ldconfig-path @PATH]`, `enable-cuda-compat --host-driver-version V` (with
    update-ldcache: it orders the cache), `disable-device-node-modification [--params-file P]`
    (when params_file is given; P only when it is not /proc/driver/nvidia/params) and
    `update-application-profile` in one process; the subcommands in `disabled` left out (just the
    program name when that is all of them)."""
    return [HOOK_PROGRAM] + [arg for entry in _subcommands(links, folders, ldconfig, host_driver_version,
                                                           params_file, OURS, disabled) for arg in entry]


def nvidia_hook_entries(links, folders, ldconfig: str | None = None, *, host_driver_version: str | None = None,
                        params_file: str | None = None, program: str = HOOK_PROGRAM,
                        disabled: frozenset[str] = frozenset()) -> list[list[str]]:
    """The same work as NVIDIA's tools spell it: one argv per subcommand (its hook parses only one),
    `--host-driver-version=V`, ldconfig without `@`, no --params-file (it reads the host's /proc);
    `nvidia-ctk` takes them after `hook`."""
    prefix = [program, "hook"] if program == "nvidia-ctk" else [program]
    return [prefix + entry for entry in _subcommands(links, folders, ldconfig, host_driver_version,
                                                     params_file, NVIDIAS, disabled)]


def _subcommands(links, folders, ldconfig, host_driver_version, params_file, flavour,
                 disabled: frozenset[str] = frozenset()) -> list[list[str]]:
    out = []
    links, folders = list(links), list(folders)
    if links:
        out.append([CREATE_SYMLINKS] + [a for target, link in links for a in ("--link", f"{target}::{link}")])
    if folders and host_driver_version:
        out.append([ENABLE_CUDA_COMPAT, f"--host-driver-version={host_driver_version}"] if flavour == NVIDIAS
                   else [ENABLE_CUDA_COMPAT, "--host-driver-version", host_driver_version])
    if folders:
        entry = [UPDATE_LDCACHE] + [a for folder in folders for a in ("--folder", folder)]
        if ldconfig and ldconfig.lstrip("@") != DEFAULT_LDCONFIG:
            entry += ["--ldconfig-path", ("@" if flavour == OURS else "") + ldconfig.lstrip("@")]
        out.append(entry)
    if params_file:
        entry = [DISABLE_DEVICE_NODE_MODIFICATION]
        if flavour == OURS and params_file != DRIVER_PARAMS:
            entry += ["--params-file", params_file]
        out.append(entry)
    if flavour == OURS:
        out.append([UPDATE_APPLICATION_PROFILE])
    if UPDATE_LDCACHE in disabled:   # enable-cuda-compat orders the cache update-ldcache builds: nothing alone
        disabled = disabled | {ENABLE_CUDA_COMPAT}
    return [entry for entry in out if entry[0] not in disabled]


class _Node(Record, frozen=True):
    path: str        # in the container
    host_path: str
    major: int
    minor: int


class EditsBuilder:
    """Edits for one driver root, inventory and set of capabilities. Driver files are located once,
    on first use; device nodes are read from the host as they are asked for."""

    def __init__(self, driver_root: DriverRoot | str, inventory: Inventory, capabilities: Iterable[str], *,
                 hook_path: str | None = None, ldconfig: str | None = None,
                 driver_files: DriverFiles | None = None, search_path: str | None = None,
                 mps_pipe_directory: str | None = None, ld_cache: str | None = None,
                 hook_flavour: str = OURS, files_cache_dir: str | None = None,
                 disabled_hooks: Iterable[str] = ()):
        self.root = driver_root if isinstance(driver_root, DriverRoot) else DriverRoot(driver_root)
        self.inventory = inventory
        try:
            self.capabilities = parse_capabilities(capabilities)
        except DriverFilesError as e:
            raise DiscoveryError(e.what, e.where) from None
        self.hook_path = hook_path or default_hook_path()
        self.hook_flavour = hook_flavour   # NVIDIAS: NVIDIA's program at hook_path (hook_flavour_of)
        # subcommands left out of the hook entries (`cdi generate --disable-hook`; ALL_HOOKS: no entry)
        self.disabled_hooks = frozenset(disabled_hooks)
        self.ldconfig = ldconfig
        self._driver_files = driver_files
        self.files_cache_dir = files_cache_dir   # driver files kept there between runs (driver_files_cache)
        self._locate_options = {k: v for k, v in (("search_path", search_path),
                                                  ("mps_pipe_directory", mps_pipe_directory),
                                                  ("ld_cache", ld_cache)) if v is not None}
        self._common: ContainerEdits | None = None

    # -- per device ----------------------------------------------------------------------------

    def device_edits(self, device: Gpu | MigDevice) -> ContainerEdits:
        """A GPU: its /dev/nvidia<minor>. A MIG device: its parent's node and its GI and CI
        capability nodes (/dev/nvidia-caps/nvidia-cap<N>)."""
        if isinstance(device, MigDevice):
            parent = self.inventory.gpu_by_index(device.parent_index)
            if parent is None:
                raise DiscoveryError(f"MIG device {device.uuid} has no parent GPU {device.parent_index}")
            names = [f"nvidia{parent.minor}", f"{MIG_CAP_DIR}/nvidia-cap{device.gi_cap_minor}",
                     f"{MIG_CAP_DIR}/nvidia-cap{device.ci_cap_minor}"]
            what = f"MIG device {device.parent_index}:{device.index} ({device.uuid})"
        else:
            names = [f"nvidia{device.minor}"]
            what = f"GPU {device.index} ({device.uuid})"
        nodes = []
        for name in names:
            node = self._node(name)
            if node is None:
                raise DiscoveryError(f"device node of {what} is missing", self.root.dev_path(name))
            nodes.append(node)
        if isinstance(device, Gpu) and self.capabilities & GRAPHICS_CAPABILITIES:
            nodes += self._drm_nodes(device)
        return ContainerEdits(device_nodes=[self._device_node(n) for n in nodes])

    def _drm_nodes(self, gpu: Gpu) -> list[_Node]:
        """The GPU's DRM nodes (/dev/dri/card<N>, renderD<N>) as its PCI device lists them in sysfs,
        where present (a headless driver, or a simulated host, has none)."""
        drm_dir = self.root.sys_path(f"bus/pci/devices/{sysfs_bus_id(gpu.pci_bus_id)}/drm")
        try:
            names = sorted(n for n in os.listdir(drm_dir) if n.startswith(("card", "renderD")))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise DiscoveryError(f"cannot list DRM devices: {e.strerror or e}", drm_dir) from None
        nodes = []
        for name in names:
            node = self._node(f"{DRI_DIR}/{name}")
            if node is None:
                log.warning("DRM device node %s of GPU %d is missing: not injected",
                            self.root.dev_path(f"{DRI_DIR}/{name}"), gpu.index)
            else:
                nodes.append(node)
        return nodes

    # -- common --------------------------------------------------------------------------------

    @property
    def driver_files(self) -> DriverFiles:
        if self._driver_files is None:
            try:
                # kept between runs only for the default search path and MPS dir (the cache's key holds those)
                if (self.files_cache_dir and set(self._locate_options) <= {"ld_cache"}
                        and not self.root.library_search_paths):
                    from cdi.driver_files_cache import locate_driver_files_kept

                    self._driver_files = locate_driver_files_kept(
                        self.files_cache_dir, self.root.path, self.inventory.driver_version, self.capabilities,
                        **self._locate_options)
                else:
                    self._driver_files = locate_driver_files(self.root, self.inventory.driver_version,
                                                             self.capabilities, **self._locate_options)
            except DriverFilesError as e:
                raise DiscoveryError(e.what, e.where) from None
        return self._driver_files

    def common_edits(self) -> ContainerEdits:
        """Edits every request gets once: env, control nodes, driver files, the hook entry.
        Built once per builder; callers get a copy they may change."""
        if self._common is None:
            self._common = self._build_common()
        return _copy(self._common)

    def _build_common(self) -> ContainerEdits:
        names = [CONTROL_NODE]
        for cap in sorted(self.capabilities & CAPABILITY_NODES.keys()):
            names += CAPABILITY_NODES[cap]
        nodes = []
        for name in names:
            node = self._node(name)
            if node is None:
                if name == CONTROL_NODE:
                    raise DiscoveryError("control device node is missing", self.root.dev_path(name))
                log.warning("device node %s is missing: not injected", self.root.dev_path(name))
                continue
            nodes.append(self._device_node(node))
        files = self.driver_files
        mounts = [Mount(host_path=f.host_path, container_path=f.container_path,
                        options=list(MOUNT_OPTIONS[f.kind])) for f in files.files]
        links = [(link.target, link.path) for link in files.symlinks]
        folders = list(dict.fromkeys(posixpath.dirname(f.container_path) for f in files.libraries))
        libcuda = [posixpath.dirname(f.container_path) for f in files.of_kind(LIBRARY) if f.soname == LIBCUDA_SONAME]
        params = driver_params_path(self.root)
        work = {"host_driver_version": self.inventory.driver_version if libcuda else None,
                "params_file": params if os.path.isfile(params) else None}
        work["disabled"] = self.disabled_hooks
        if ALL_HOOKS in self.disabled_hooks:
            argvs = []
        elif self.hook_flavour == NVIDIAS:
            argvs = nvidia_hook_entries(links, folders, self.ldconfig, **work,
                                        program=os.path.basename(self.hook_path))
        else:
            argvs = [hook_args(links, folders, self.ldconfig, **work)]   # update-application-profile at least
            argvs = [argv for argv in argvs if len(argv) > 1]
            if os.path.basename(self.hook_path) == "nvidia-ctk":   # our nvidia-ctk runs the hook as `hook ...`
                argvs = [["nvidia-ctk", "hook", *argv[1:]] for argv in argvs]
        hook_name = CREATE_CONTAINER if self.hook_flavour == NVIDIAS else CREATE_RUNTIME
        hooks = [Hook(hook_name=hook_name, path=self.hook_path, args=argv, env=list(HOOK_ENV)) for argv in argvs]
        env = [f"{LIBCUDA_DIR_ENV}={libcuda[0]}"] if libcuda else []
        return ContainerEdits(env=env + [VISIBLE_DEVICES_VOID], device_nodes=nodes, mounts=mounts, hooks=hooks)

    # -- a resolved request --------------------------------------------------------------------

    def edits_for(self, devices: Iterable[Gpu | MigDevice], *, common: bool = True) -> ContainerEdits:
        """Common edits (unless common=False) followed by each device's, duplicates removed (two MIG
        devices of one GPU share its node)."""
        edits = self.common_edits() if common else ContainerEdits()
        for device in devices:
            edits.append(self.device_edits(device))
        return dedup_edits(edits)

    # -- helpers -------------------------------------------------------------------------------

    def _node(self, name: str) -> _Node | None:
        host_path = self.root.dev_path(name)
        try:
            st = os.stat(host_path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise DiscoveryError(f"cannot stat device node: {e.strerror or e}", host_path) from None
        if not stat.S_ISCHR(st.st_mode):
            raise DiscoveryError("not a character device", host_path)
        return _Node("/dev/" + name, host_path, os.major(st.st_rdev), os.minor(st.st_rdev))

    @staticmethod
    def _device_node(node: _Node) -> DeviceNode:
        return DeviceNode(path=node.path, host_path=node.host_path if node.host_path != node.path else None,
                          type="c", major=node.major, minor=node.minor)


def dedup_edits(edits: ContainerEdits) -> ContainerEdits:
    """Drop repeated device nodes (by container path), mounts (by destination), env entries and
    identical hooks, keeping the first of each."""
    seen_nodes, seen_mounts, seen_hooks = set(), set(), []
    nodes, mounts, hooks = [], [], []
    for node in edits.device_nodes:
        if node.path not in seen_nodes:
            seen_nodes.add(node.path)
            nodes.append(node)
    for mount in edits.mounts:
        if mount.container_path not in seen_mounts:
            seen_mounts.add(mount.container_path)
            mounts.append(mount)
    for hook in edits.hooks:
        if hook not in seen_hooks:
            seen_hooks.append(hook)
            hooks.append(hook)
    return ContainerEdits(env=list(dict.fromkeys(edits.env)), device_nodes=nodes, mounts=mounts, hooks=hooks,
                          intel_rdt=edits.intel_rdt, additional_gids=list(dict.fromkeys(edits.additional_gids)),
                          net_devices=list(edits.net_devices))


def _copy(edits: ContainerEdits) -> ContainerEdits:
    return deep_copy(edits)


def build_edits(driver_root: DriverRoot | str, inventory: Inventory, capabilities: Iterable[str],
                devices: Iterable[Gpu | MigDevice], **options) -> ContainerEdits:
    """All edits for one resolved request (e.g. a cdi.selection.Selection's gpus + mig_devices):
    common edits once, then each device's. `options` as for EditsBuilder (hook_path, ldconfig, ...)."""
    if hasattr(devices, "mig_devices"):   # a cdi.selection.Selection
        devices = tuple(devices.gpus) + tuple(devices.mig_devices)
    return EditsBuilder(driver_root, inventory, capabilities, **options).edits_for(devices)


def device_names(device: Gpu | MigDevice, strategies: Iterable[str]) -> list[str]:
    """The device's names under each strategy, in order, without repeats."""
    names = []
    for strategy in strategies:
        is_mig = isinstance(device, MigDevice)
        index = f"{device.parent_index}:{device.index}" if is_mig else str(device.index)
        if strategy == "index":
            name = index
        elif strategy == "uuid":
            name = device.uuid
        elif strategy == "type-index":
            name = ("mig" if is_mig else "gpu") + index
        else:
            raise DiscoveryError(f"unknown device name strategy {strategy!r} "
                                 f"(known: {', '.join(NAME_STRATEGIES)})")
        if name not in names:
            names.append(name)
    return names


def build_spec_devices(builder: EditsBuilder, devices: Iterable[Gpu | MigDevice] | None = None,
                       strategies: Iterable[str] = ("index", "uuid"), all_device: bool = True) -> list[Device]:
    """CDI devices for `devices` (default: Inventory.all_devices, every GPU not in MIG mode then
    every MIG device), one per name and strategy, plus "all" with every device's nodes. The common
    edits are not included: they are the spec's own containerEdits (builder.common_edits())."""
    if devices is None:
        devices = builder.inventory.all_devices()
    strategies = list(strategies)
    out, everything = [], ContainerEdits()
    for device in devices:
        edits = builder.device_edits(device)
        everything.append(edits)
        for name in device_names(device, strategies):
            out.append(Device(name=name, container_edits=_copy(edits)))
    if all_device and out:
        out.append(Device(name=ALL_DEVICE, container_edits=dedup_edits(everything)))
    return out
