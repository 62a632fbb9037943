"""The Python half of nvidia-cdi-hook, for the prestart hook's live injection.

nvidia-cdi-hook itself, the program CDI specs' hooks run, is C (cdi_hook/,
built into the static launcher: no interpreter starts for it). This module keeps what the Python
programs need of it:
  - parse_args: the same argument chains the C program reads (hook.inject re-reads the hook entry
    cdi.discover built, to do the same work live); both parsers are held to one table of cases,
    tests/unit/cdi_hook/args_cases.json:
        create-symlinks --link TARGET::LINK ... update-ldcache --folder DIR [--ldconfig-path @PATH]
        (NVIDIA's one-subcommand-per-entry form and a leading `hook` too; --container-spec FILE,
        global --debug/--quiet; unknown subcommands and options are warnings)
  - read_state, state_bundle, load_container_config: the prestart hook's readers of the state and
    the bundle's config.json (the same rules and limits as the C program: 1 MiB of state, 16 MiB of
    config.json, read without blocking, regular files only; a repeated key: the last wins), through
    cdi.regular_file and cdi.json_codec (json.loads' values without importing json);
  - update_ldcache: the ld cache of a live container, through libcontainer_c (the ld.so.conf.d
    drop-in and the sandboxed ldconfig with its cache installed only when it changed are the C
    helper's, shared with the C program).
It imports only the stdlib, cdi.json_codec, cdi.regular_file and libcontainer_c.
"""
from __future__ import annotations

import os

from cdi import json_codec
from cdi.errors import what_where
from cdi.regular_file import read_regular_file

CREATE_SYMLINKS, UPDATE_LDCACHE = "create-symlinks", "update-ldcache"
ENABLE_CUDA_COMPAT, DISABLE_DEVICE_NODE_MODIFICATION = "enable-cuda-compat", "disable-device-node-modification"
UPDATE_APPLICATION_PROFILE = "update-application-profile"
SUBCOMMANDS = (CREATE_SYMLINKS, UPDATE_LDCACHE, ENABLE_CUDA_COMPAT, DISABLE_DEVICE_NODE_MODIFICATION,
               UPDATE_APPLICATION_PROFILE)
DEFAULT_LDCONFIG = "/sbin/ldconfig"
PARAMS_PATH = "/proc/driver/nvidia/params"
MAX_STATE = 1 << 20
MAX_CONFIG = 16 << 20
LINK_SEPARATOR = "::"

# subcommand -> {option: (field, repeatable)}
_OPTIONS = {
    CREATE_SYMLINKS: {"--link": ("links", True), "--container-spec": ("container_spec", False),
                      "--host-root": (None, False)},   # --host-root: an old flag with no effect
    UPDATE_LDCACHE: {"--folder": ("folders", True), "--ldconfig-path": ("ldconfig", False),
                     "--container-spec": ("container_spec", False)},
    ENABLE_CUDA_COMPAT: {"--host-driver-version": ("host_driver_version", False),
                         "--container-spec": ("container_spec", False)},
    # --params-file: ours, a driver root's copy of the driver's params
    DISABLE_DEVICE_NODE_MODIFICATION: {"--params-file": ("params_file", False),
                                       "--container-spec": ("container_spec", False)},
    UPDATE_APPLICATION_PROFILE: {"--container-spec": ("container_spec", False)},
}
# the compat folder is an order in the ld cache update-ldcache builds (see the C program's args.c)
COMPAT_ALONE = f"ignoring {ENABLE_CUDA_COMPAT}: it needs {UPDATE_LDCACHE} in the same hook entry"
_GLOBAL_FLAGS = ("--debug", "-d", "--quiet", "-q")


class HookError(Exception):
    """One line for the user: what went wrong and where."""

    def __init__(self, what: str, where: str | None = None):
        super().__init__(what_where(what, where))


class Tasks:
    """What one hook invocation asks for (a plain class: dataclasses would import inspect & co.)."""

    def __init__(self):
        self.links: list[tuple[str, str]] = []    # (target, link path in the container)
        self.folders: list[str] = []               # library folders for ldconfig
        self.update_ldcache = False
        self.ldconfig = DEFAULT_LDCONFIG           # host path
        self.host_driver_version: str | None = None   # enable-cuda-compat
        self.disable_device_node_modification = False
        self.update_application_profile = False   # EGL/Vulkan limited to the container's GPUs
        self.params_file = PARAMS_PATH             # the driver's params, a host path
        self.container_spec: str | None = None     # config.json, if given
        self.warnings: list[str] = []

    @property
    def empty(self) -> bool:
        return not (self.links or self.update_ldcache or self.disable_device_node_modification
                    or self.update_application_profile)


def parse_args(args: list[str]) -> Tasks:
    """Parse a chain of subcommands (args without the program name). Raises HookError for a
    malformed value of a known option; unknown things become warnings."""
    tasks = Tasks()
    if args[:1] == ["hook"]:   # specs that run `nvidia-ctk hook <subcommand>`
        args = args[1:]
    if all(arg in _GLOBAL_FLAGS for arg in args):   # a person typing the bare command: say what it takes
        raise HookError(f"missing subcommand: {', '.join(SUBCOMMANDS)}", "see nvidia-cdi-hook --help")
    current = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in SUBCOMMANDS:
            current = arg
            tasks.update_ldcache |= arg == UPDATE_LDCACHE
            tasks.disable_device_node_modification |= arg == DISABLE_DEVICE_NODE_MODIFICATION
            tasks.update_application_profile |= arg == UPDATE_APPLICATION_PROFILE
            continue
        if arg in _GLOBAL_FLAGS and current is None:
            continue
        if not arg.startswith("-"):
            # a subcommand of a newer tool (or a stray word): skipped with its options
            tasks.warnings.append(f"ignoring unknown subcommand {arg!r}")
            current = "unknown"
            continue
        name, has_value, value = arg.partition("=")
        option = _OPTIONS.get(current, {}).get(name)
        if option is None:
            if current != "unknown":
                tasks.warnings.append(f"ignoring unknown option {name!r}" + (f" of {current}" if current else ""))
            # a following plain word is taken as its value, unless it is a subcommand
            if not has_value and i < len(args) and not args[i].startswith("-") and args[i] not in SUBCOMMANDS:
                i += 1
            continue
        if not has_value:
            if i >= len(args):
                raise HookError(f"option {name} needs a value", current)
            value = args[i]
            i += 1
        _set_option(tasks, current, name, option, value)
    if tasks.host_driver_version and not tasks.update_ldcache:
        tasks.warnings.append(COMPAT_ALONE)
    return tasks


def _set_option(tasks: Tasks, subcommand: str, name: str, option, value: str) -> None:
    attr, repeatable = option
    if attr is None:
        return
    if not value or "\0" in value:
        raise HookError(f"empty or invalid value for {name}", subcommand)
    if attr == "links":
        target, sep, link = value.partition(LINK_SEPARATOR)
        if not sep or not target or not link.startswith("/"):
            raise HookError(f"invalid link {value!r}: expected TARGET::/ABSOLUTE/LINK", f"{subcommand} {name}")
        tasks.links.append((target, link))
    elif attr == "folders":
        if not value.startswith("/"):
            raise HookError(f"folder {value!r} is not an absolute path", f"{subcommand} {name}")
        if value not in tasks.folders:
            tasks.folders.append(value)
    elif attr == "ldconfig":
        path = value[1:] if value.startswith("@") else value
        if not path.startswith("/"):
            raise HookError(f"ldconfig {value!r} must be an absolute host path", f"{subcommand} {name}")
        tasks.ldconfig = path  # always the host's binary: the runner never runs one from the image
    elif attr == "host_driver_version":
        if not value[0].isascii() or not value[0].isdigit():
            raise HookError(f"invalid driver version {value!r}", f"{subcommand} {name}")
        tasks.host_driver_version = value
    elif attr == "params_file":
        if not value.startswith("/"):
            raise HookError(f"params file {value!r} is not an absolute path", f"{subcommand} {name}")
        tasks.params_file = value
    else:
        # container_spec: under runc the hook's cwd is the rootfs, so a relative path is the image's choice
        if not value.startswith("/"):
            raise HookError(f"container spec {value!r} is not an absolute path", f"{subcommand} {name}")
        setattr(tasks, attr, value)


# -- the container --------------------------------------------------------------------------------

def read_state(stream) -> dict:
    data = stream.read(MAX_STATE + 1)
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_STATE:
        raise HookError("container state is too large", "stdin")
    try:
        state = json_codec.loads(data)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the parser goes
        raise HookError(f"invalid container state: {e}", "stdin") from None
    if not isinstance(state, dict):
        raise HookError("invalid container state: not a JSON object", "stdin")
    return state


def state_bundle(state: dict) -> str:
    """The bundle directory the state names (runc/crun: `bundle`; older runtimes: `bundlePath`)."""
    bundle = state.get("bundle") or state.get("bundlePath")
    if not isinstance(bundle, str) or not bundle.startswith("/"):
        raise HookError("container state has no absolute bundle path", "stdin")
    return bundle


def fix_root_bundle(bundle: str, pid: int) -> str:
    """crun (1.8 at least; fixed upstream since) hands createRuntime and prestart hooks `"bundle": "/"`
    when the container has a user namespace and devices: its getcwd() after it left the bundle. The
    waiting init `pid` is still where crun started it, in the bundle (nvidia-cdi-hook: container.c)."""
    if bundle != "/":
        return bundle
    where = f"/proc/{pid}/cwd"
    try:
        cwd = os.readlink(where)
    except OSError as e:
        raise HookError(f"the container state's bundle is /, and the init's directory cannot be read: "
                        f"{e.strerror}", where) from None
    return cwd if cwd.startswith("/") and cwd != "/" else bundle


def load_container_config(bundle: str, container_spec: str | None = None) -> tuple[dict, str]:
    """(config.json, rootfs) of the bundle: the rootfs is config.json's root.path, relative to the
    bundle (never the cwd). The prestart hook's reader; nvidia-cdi-hook (C, container.c) follows the
    same rules."""
    config_path = container_spec or os.path.join(bundle, "config.json")
    try:
        # a regular file only, read without blocking: a FIFO there must not hang the container's start
        data, _ = read_regular_file(config_path, MAX_CONFIG, follow_symlinks=False)
    except OSError as e:
        raise HookError(f"cannot read the container's config: {e.strerror or e}", config_path) from None
    except ValueError as e:
        what = "is too large" if str(e).startswith("larger") else f"is {e}"
        raise HookError(f"container config {what}", config_path) from None
    try:
        config = json_codec.loads(data)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the parser goes
        raise HookError(f"invalid container config: {e}", config_path) from None
    root = config.get("root") if isinstance(config, dict) else None
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise HookError("container config has no root.path", config_path)
    # every other member the prestart hook reads has its type: one line naming it if not (nvidia-cdi-hook
    # reads root.path only)
    from cdi.oci_config import check_config_json

    check_config_json(config, data)
    return config, os.path.normpath(os.path.join(bundle, path))


def update_ldcache(root, folders: list[str], ldconfig: str, warn, host_driver_version: str | None = None) -> None:
    """Rebuild the ld.so.cache of `root` (an open libcontainer_c.rootfs.Rootfs) with the host's
    ldconfig, scanning `folders` too; with `host_driver_version` (enable-cuda-compat), the image's CUDA
    compat folder goes first when its libcuda is for a newer driver major (as nvidia-cdi-hook does).
    The cache is written only when it changed (libcontainer_c.ldconfig.run_ldconfig: a restarted
    container's is left as it is).

    Everything here goes through root: the folders and the compat folder looked at, the drop-in, the
    cache. Opened with the container's pid (Rootfs(rootfs, pid): the container's view, where ldconfig
    runs too), a volume the container has over the rootfs' /etc gets the cache, not the directory
    under it that only the caller's namespace sees."""
    from libcontainer_c.errors import ContainerFsError
    from libcontainer_c.ldconfig import LdconfigError, cuda_compat_folder, run_ldconfig

    try:
        has_etc = root.exists("/etc")
        compat = cuda_compat_folder(root, host_driver_version, warn) if has_etc and host_driver_version else None
        existing = ([compat] if compat else []) + [f for f in folders if f != compat and root.exists(f)]
    except ContainerFsError as e:
        raise HookError(f"cannot open the container's root: {e.strerror}", root.path) from None
    if not has_etc:
        warn("the container has no /etc: ld.so.cache not updated")
        return
    if existing:
        write_ld_so_conf(root, existing, warn)
    try:
        run_ldconfig(root, existing, ldconfig=ldconfig)
    except LdconfigError as e:
        raise HookError(f"ldconfig failed: {e}", root.path) from None


def write_ld_so_conf(root, folders: list[str], warn) -> None:
    """List the folders in the root's /etc/ld.so.conf.d/00-nvidia-cdi-hook.conf, so that an ldconfig
    the container runs later (a package install) keeps the driver libraries. Written by the C helper
    (the one writer, also nvidia-cdi-hook's); a failure is a warning."""
    from libcontainer_c.errors import ContainerFsError
    from libcontainer_c.ldconfig import LD_SO_CONF_PATH, write_ld_so_conf as write

    try:
        write(root, folders)
    except ContainerFsError as e:
        warn(f"cannot write {LD_SO_CONF_PATH}: {e.strerror}")
