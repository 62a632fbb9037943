"""Live injection: a GPU request applied to a running container, with rollback.

    plan = plan_injection(driver_root, inventory, selection, {"compute", "utility"}, ldconfig="/sbin/ldconfig")
    injected = inject(plan, Target(rootfs="/run/.../rootfs", pid=4242))

Used by the prestart hook (hook.prestart) and `nvidia-container-cli configure`. The plan is the edits
cdi.discover builds for the selection (the same edits a CDI spec would hold), plus what only a live
injection adds: MIG config/monitor and IMEX channel nodes, the /proc/driver/nvidia view
(hook.proc_driver), and the device cgroup rules of every node. Nothing about which files a
capability needs is decided here.

Applying it, in order:
1. one RootfsBatch, run by a forked C child inside the container's mount namespace (this process
   never changes namespace): device nodes bind-mounted after checking, on the very fd that is
   cloned, that each is the expected char device (ro,nosuid,noexec, never nodev); driver files
   (libraries and binaries never noexec); the links of the edits' nvidia-cdi-hook entry; the
   /proc/driver/nvidia tmpfs where that directory exists. The child undoes its own mounts if an
   operation fails.
2. the ld cache, by the one sandboxed ldconfig runner (host binary, chroot, no capabilities), with
   the image's CUDA compat folder first when the entry asks for enable-cuda-compat and its libcuda is
   for a newer driver (libcontainer_c.ldconfig.cuda_compat_folder, nvidia-cdi-hook's C check). The
   cache and the ld.so.conf.d drop-in are written through the container's view of the rootfs
   (/proc/<pid>/root, then the rootfs path): a volume over its /etc gets them.
3. the device cgroup: v1 `devices.allow` of the container's cgroup, or on cgroup v2 a device program
   that replaces the runtime's and holds its rules plus ours.
A failure in 2 or 3 unmounts everything step 1 mounted (a second batch in the same namespace) before
the error is raised. Links and empty mount targets stay: harmless entries in the container's rootfs
(the batch makes its new file targets hard links of one empty file, and links of the same text hard
links of one link: docs/libcontainer_c.md).
"""
from __future__ import annotations

import os
import posixpath
import stat

from cdi.discover import HOOK_PROGRAM, EditsBuilder
from cdi.driver_root import DriverRoot
from cdi.errors import what_where
from cdi.inventory import Inventory
from cdi.spec import ContainerEdits, DeviceNode, Mount

IMEX_DIR = "nvidia-caps-imex-channels"
MIG_CAP_DIR = "nvidia-caps"
MAX_IMEX_CHANNELS = 4096

_MOUNT_FLAGS = ("ro", "nosuid", "nodev", "noexec")
# options that switch a flag off (as mount(8) reads them)
_CLEARING = {"rw": "ro", "exec": "noexec"}


class InjectionError(Exception):
    """One line for the user: what went wrong and where (a host path, a container path, a cgroup)."""

    def __init__(self, what: str, where: str | None = None):
        super().__init__(what_where(what, where))
        self.what, self.where = what, where


class Target:
    """The container to inject into. `rootfs`: its root as the host sees it, which is also its path
    inside the container's mount namespace until pivot_root (prestart; `configure` is given it).
    `pid`: a process in the container (None: this process's namespace, for tests). `cgroups`: False
    skips the device cgroup (config `no-cgroups`). `cgroup`: ("v1"|"v2", path) instead of reading
    /proc/<pid>/cgroup. `bind_devices`: False leaves the device nodes to the caller (they are still
    allowed in the device cgroup; `nvidia-container-cli configure --no-devbind`)."""

    def __init__(self, rootfs: str, pid: int | None = None, *, cgroups: bool = True,
                 cgroup: tuple[str, str] | None = None, bind_devices: bool = True):
        if not rootfs or not os.path.isabs(rootfs):
            raise InjectionError("the container's root must be an absolute path", rootfs or "rootfs")
        self.rootfs = os.path.normpath(rootfs)
        self.pid = pid
        self.cgroups = cgroups
        self.cgroup = cgroup
        self.bind_devices = bind_devices


class InjectionPlan:
    """Everything that will be done; built without touching the container."""

    def __init__(self, edits: ContainerEdits, links: list[tuple[str, str]], folders: list[str],
                 update_ldcache: bool, ldconfig: str, proc_view, host_driver_version: str | None = None):
        self.edits = edits
        self.links = links              # (target, link path in the container)
        self.folders = folders          # library folders for ldconfig
        self.update_ldcache = update_ldcache
        self.ldconfig = ldconfig        # host path
        self.proc_view = proc_view      # hook.proc_driver.ProcView (ModifyDeviceFiles: 0 included)
        self.host_driver_version = host_driver_version   # enable-cuda-compat

    @property
    def device_nodes(self) -> list[DeviceNode]:
        return self.edits.device_nodes

    @property
    def mounts(self) -> list[Mount]:
        return self.edits.mounts

    def device_rules(self):
        """One allow rule per node: read and write, never mknod."""
        from libcontainer_c.device_cgroup import DeviceRule

        return [DeviceRule(node.type or "c", node.major, node.minor, node.permissions or "rw")
                for node in self.device_nodes]


class Injected:
    """What was done: container paths of the nodes and mounts, the links, the cgroup touched."""

    def __init__(self, nodes: list[str], mounts: list[str], links: list[str], cgroup: tuple[str, str] | None,
                 skipped_links: list[str]):
        self.nodes, self.mounts, self.links, self.cgroup = nodes, mounts, links, cgroup
        self.skipped_links = skipped_links

    def __repr__(self) -> str:
        return (f"Injected(nodes={self.nodes}, mounts={len(self.mounts)}, links={len(self.links)}, "
                f"cgroup={self.cgroup})")


# -- planning ---------------------------------------------------------------------------------------

def plan_injection(driver_root: DriverRoot | str, inventory: Inventory, selection, capabilities, *,
                   mig_config: tuple[str, ...] = (), mig_monitor: tuple[str, ...] = (),
                   imex_channels: tuple[int, ...] = (), imex_all: bool = False,
                   ldconfig: str = "/sbin/ldconfig", ld_cache: str | None = None,
                   proc_view: bool = True, cache_dir: str | None = None) -> InjectionPlan:
    """The plan for `selection` (a cdi.selection.Selection) with `capabilities`. `mig_config` /
    `mig_monitor`: ids from NVIDIA_MIG_{CONFIG,MONITOR}_DEVICES (the resolver only lets privileged
    containers have them); `ldconfig`: the host ldconfig to run; `ld_cache`: the driver root's
    ld.so.cache path (config `ldcache`); `cache_dir`: where the driver files found are kept between
    runs (cdi.driver_files_cache; None: searched each time). Raises cdi errors (CdiError) or
    InjectionError."""
    from hook.cdi_hook import HookError, parse_args
    from hook.proc_driver import build_proc_view

    root = driver_root if isinstance(driver_root, DriverRoot) else DriverRoot(driver_root)
    builder = EditsBuilder(root, inventory, capabilities, ldconfig="@" + ldconfig, files_cache_dir=cache_dir,
                           **({"ld_cache": ld_cache} if ld_cache else {}))
    devices = tuple(selection.gpus) + tuple(selection.mig_devices)
    edits = builder.edits_for(devices)
    if mig_config or mig_monitor:
        _check_gpu_ids(mig_config, "NVIDIA_MIG_CONFIG_DEVICES", inventory)
        _check_gpu_ids(mig_monitor, "NVIDIA_MIG_MONITOR_DEVICES", inventory)
        minors = _mig_global_minors(root)
        for wanted, name in ((mig_config, "config"), (mig_monitor, "monitor")):
            if wanted:
                edits.device_nodes.append(_host_node(root, f"{MIG_CAP_DIR}/nvidia-cap{minors[name]}",
                                                     f"MIG {name} capability"))
    for name in _imex_channel_names(root, imex_channels, imex_all):
        edits.device_nodes.append(_host_node(root, f"{IMEX_DIR}/{name}", f"IMEX channel {name[7:]}"))

    links, folders, update_ldcache, host_driver_version = [], [], False, None
    for hook in edits.hooks:
        if posixpath.basename(hook.path) != HOOK_PROGRAM:
            raise InjectionError(f"cannot run hook {hook.path} live: only {HOOK_PROGRAM} entries are known")
        try:
            tasks = parse_args(list(hook.args[1:]))
        except HookError as e:
            raise InjectionError(f"invalid {HOOK_PROGRAM} entry: {e}") from None
        links += [link for link in tasks.links if link not in links]
        folders += [folder for folder in tasks.folders if folder not in folders]
        update_ldcache |= tasks.update_ldcache
        host_driver_version = host_driver_version or tasks.host_driver_version
        # disable-device-node-modification: the /proc/driver/nvidia view below holds the params with
        # ModifyDeviceFiles: 0 already. update-application-profile: not done live, as NVIDIA's legacy
        # injector (libnvidia-container) writes no application profile either (README, Differences)
    view = None
    if proc_view:
        view = build_proc_view(root.proc_path("driver/nvidia"), selection.all_gpus(inventory),
                               selection.mig_devices, lambda index: inventory.gpu_by_index(index).minor,
                               mig_config=bool(mig_config), mig_monitor=bool(mig_monitor))
    return InjectionPlan(edits, links, folders, update_ldcache, ldconfig, view, host_driver_version)


def _check_gpu_ids(ids: tuple[str, ...], variable: str, inventory: Inventory) -> None:
    if not ids or ids == ("all",):
        return
    from cdi.request import DeviceRequest
    from cdi.selection import select_devices

    select_devices(DeviceRequest(source="env", where=variable, devices=ids, is_gpu_container=True), inventory)


def _mig_global_minors(root: DriverRoot) -> dict[str, int]:
    """The minors of the MIG config and monitor capabilities from the driver's mig-minors."""
    from cdi.nvml import MIG_MINORS, NvmlError, read_mig_control_minors

    try:
        return read_mig_control_minors(root.proc_path(MIG_MINORS))
    except NvmlError as e:
        raise InjectionError(e.what, e.where) from None


def _is_decimal(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes characters such as '²' that int() refuses."""
    return text.isascii() and text.isdigit()


def _imex_channel_names(root: DriverRoot, channels: tuple[int, ...], every: bool) -> list[str]:
    if every:
        directory = root.dev_path(IMEX_DIR)
        try:
            names = [n for n in os.listdir(directory) if n.startswith("channel") and _is_decimal(n[7:])]
        except FileNotFoundError:
            raise InjectionError("IMEX channels requested, but the driver has none", directory) from None
        if len(names) > MAX_IMEX_CHANNELS:
            raise InjectionError(f"more than {MAX_IMEX_CHANNELS} IMEX channels", directory)
        return sorted(names, key=lambda n: int(n[7:]))
    return [f"channel{c}" for c in channels]


def _host_node(root: DriverRoot, name: str, what: str) -> DeviceNode:
    host_path = root.dev_path(name)
    try:
        st = os.stat(host_path)
    except FileNotFoundError:
        raise InjectionError(f"device node of the {what} does not exist", host_path) from None
    except OSError as e:
        raise InjectionError(f"cannot stat the device node of the {what}: {e.strerror}", host_path) from None
    if not stat.S_ISCHR(st.st_mode):
        raise InjectionError(f"device node of the {what} is not a character device", host_path)
    path = "/dev/" + name
    return DeviceNode(path=path, host_path=host_path if host_path != path else None, type="c",
                      major=os.major(st.st_rdev), minor=os.minor(st.st_rdev))


# -- applying ---------------------------------------------------------------------------------------

def mount_options(options: list[str], name: str):
    """CDI/OCI mount options as libcontainer_c MountOptions: the flags listed are set; read-only and
    noexec are cleared when not listed (as a bind remount does), so a driver library on a host mount
    mounted noexec still runs; nosuid and nodev are never cleared. `rbind` clones submounts."""
    from libcontainer_c.rootfs import MountOptions

    listed = set(options)
    set_flags = [f for f in _MOUNT_FLAGS if f in listed]
    clear_flags = [flag for opt, flag in _CLEARING.items() if opt in listed or flag not in listed]
    clear_flags = [f for f in dict.fromkeys(clear_flags) if f not in set_flags]
    return MountOptions(set_flags, clear_flags, recursive="rbind" in listed, name=name)


def inject(plan: InjectionPlan, target: Target, warn=None) -> Injected:
    """Apply `plan` to `target` (see the module docstring). Raises InjectionError after undoing every
    mount it made."""
    warn = warn or (lambda message: None)
    root = _container_root(target) if plan.links or plan.update_ldcache else None
    try:
        return _inject(plan, target, root, warn)
    finally:
        if root is not None:
            root.close()


def _container_root(target: Target):
    """The rootfs as the container sees it (Rootfs(rootfs, pid): a volume over a library folder or
    /etc is what the container has there; the caller's own view without a pid), opened once for the
    links check and the ld cache."""
    from libcontainer_c.errors import ContainerFsError
    from libcontainer_c.rootfs import Rootfs

    try:
        return Rootfs(target.rootfs, target.pid)
    except ContainerFsError as e:
        # e.filename: the rootfs, or /proc/<pid>/root[/rootfs] (the container's view) with a pid
        raise InjectionError(f"cannot open the container's root: {e.strerror}", e.filename) from None


def _inject(plan: InjectionPlan, target: Target, root, warn) -> Injected:
    from libcontainer_c.batch import BatchError, RootfsBatch
    from libcontainer_c.errors import ContainerFsError

    links, skipped = _links_to_make(plan.links, root, warn)
    batch = RootfsBatch()
    try:
        try:
            for node in (plan.device_nodes if target.bind_devices else ()):
                batch.bind_device(node.host_path or node.path, node.path, node.major, node.minor)
            for mount in plan.mounts:
                batch.bind(mount.host_path, mount.container_path, mount_options(mount.options, mount.container_path))
        except ContainerFsError as e:
            raise InjectionError(_source_problem(e), e.filename) from None
        except ValueError as e:   # validate_bind refusing a flag combination
            raise InjectionError(str(e)) from None
        for link_target, link in links:
            batch.symlink(link_target, link)
        if plan.proc_view:
            from hook.proc_driver import add_to_batch

            add_to_batch(batch, plan.proc_view)
        try:
            batch.run(rootfs=target.rootfs, pid=target.pid)
        except BatchError as e:
            raise InjectionError(_batch_problem(e), _where(e, target)) from None
    finally:
        batch.close()
    try:
        if plan.update_ldcache:
            _update_ldcache(plan, root, warn)
        cgroup = _allow_devices(plan, target) if target.cgroups and plan.device_nodes else None
    except InjectionError:
        _undo_mounts(plan, target, warn)
        raise
    return Injected([n.path for n in plan.device_nodes], [m.container_path for m in plan.mounts],
                    [link for _, link in links], cgroup, skipped)


def _links_to_make(links, root, warn):
    """Links whose place in the image is free or already a link. A regular file or directory the
    image has there is kept (its own library), with a warning; the check runs on `root`, the
    container's view (_container_root), and the batch re-checks it in the container (EEXIST fails the
    injection)."""
    from libcontainer_c.errors import ContainerFsError

    keep, skipped = [], []
    for link_target, link in links:
        try:
            st = root.stat(link, follow_symlinks=False)
        except ContainerFsError:
            keep.append((link_target, link))   # missing (or unreachable: the batch reports it)
            continue
        if stat.S_ISLNK(st.st_mode):
            keep.append((link_target, link))
        else:
            warn(f"not linking {link} -> {link_target}: the image has its own file there")
            skipped.append(link)
    return keep, skipped


def _update_ldcache(plan: InjectionPlan, root, warn) -> None:
    from hook.cdi_hook import HookError, update_ldcache

    try:
        update_ldcache(root, plan.folders, plan.ldconfig, warn, plan.host_driver_version)
    except HookError as e:
        raise InjectionError(str(e)) from None


def _container_cgroup(target: Target) -> tuple[str, str]:
    """("v1", devices cgroup) when the devices controller is on a v1 hierarchy, else ("v2", path)."""
    from libcontainer_c.device_cgroup import cgroup2_path_of, devices_cgroup_of
    from libcontainer_c.errors import ContainerFsError

    if target.cgroup is not None:
        return target.cgroup
    if target.pid is None:
        raise InjectionError("no process to find the container's cgroup from", target.rootfs)
    try:
        return "v1", devices_cgroup_of(target.pid)
    except ContainerFsError as e:
        if e.errno != 2:
            raise InjectionError(f"cannot read the container's cgroup: {e.strerror}", e.filename) from None
    try:
        return "v2", cgroup2_path_of(target.pid)
    except ContainerFsError as e:
        raise InjectionError(f"cannot find the container's cgroup: {e.strerror}", e.filename) from None


def _allow_devices(plan: InjectionPlan, target: Target) -> tuple[str, str] | None:
    """Allow the plan's nodes in the container's device cgroup. None when there is nothing to widen:
    the root cgroup (it restricts nothing, and a program there would judge every process of the
    host), or a v2 cgroup without a device program of its own (what its ancestors allow is not ours
    to change, and a program of ours would only deny more)."""
    from libcontainer_c.device_cgroup import (allow_devices, allow_devices_v2, device_programs_attached,
                                              find_devices_hierarchy)
    from libcontainer_c.errors import ContainerFsError

    version, path = _container_cgroup(target)
    if path.strip("/") == "":
        return None
    rules = plan.device_rules()
    try:
        if version == "v1":
            allow_devices(path, rules, hierarchy=find_devices_hierarchy())
        elif device_programs_attached(path) == 0:
            return None
        else:
            allow_devices_v2(path, rules)
    except ContainerFsError as e:
        raise InjectionError(f"cannot allow the GPU devices in the container's cgroup ({version}): "
                             f"{e.operation}: {e.strerror}", e.filename) from None
    return version, path


def _undo_mounts(plan: InjectionPlan, target: Target, warn) -> None:
    """Unmount, last first, everything the batch mounted (a second batch in the same namespace)."""
    from hook.proc_driver import PROC_DIR
    from libcontainer_c.batch import BatchError, RootfsBatch

    batch = RootfsBatch()
    if plan.proc_view:
        batch.unmount(PROC_DIR)
    for mount in reversed(plan.mounts):
        batch.unmount(mount.container_path)
    for node in (reversed(plan.device_nodes) if target.bind_devices else ()):
        batch.unmount(node.path)
    try:
        batch.run(rootfs=target.rootfs, pid=target.pid)
    except BatchError as e:
        warn(f"could not undo every mount: {_batch_problem(e)} ({_where(e, target)})")


def _source_problem(e) -> str:
    if e.errno == 19 and e.operation.startswith("check device node"):
        return f"device node is not the expected one: {e.operation[len('check device node '):].strip('()')}"
    return f"cannot use {e.operation.replace('open bind source', 'the host file')}: {e.strerror}"


def _batch_problem(e) -> str:
    if e.index < 0:
        return f"cannot enter the container ({e.operation}): {e.strerror}"
    return f"cannot {e.operation} in the container: {e.strerror}"


def _where(e, target: Target) -> str:
    if e.index < 0:
        return e.filename or target.rootfs
    return f"{e.filename} in {target.rootfs}"
