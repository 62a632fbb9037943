"""nvidia-container-runtime-hook: the OCI prestart hook that gives a starting container its GPUs.

    nvidia-container-runtime-hook [-config FILE] [-debug] prestart < state.json
    nvidia-container-runtime-hook -version

Docker (`--gpus`) and the runtime shim in legacy mode add it to config.json. `poststart` and
`poststop` succeed doing nothing (old configs list the hook for them too).

prestart: the state on stdin gives the bundle and the container's pid; config.json (root.path is
relative to the bundle) gives the request, read by the shared resolver (cdi.request): annotations,
volume mounts, NVIDIA_VISIBLE_DEVICES, capabilities, NVIDIA_REQUIRE_* (checked by cdi.selection),
MIG config/monitor (privileged only) and IMEX channels. A container that asks for no GPU exits 0
having touched nothing and without loading NVML. Otherwise NVML is read from the driver root
($NVIDIA_CTK_DRIVER_ROOT, else config `[nvidia-container-cli] root`, else /), the devices are selected, and
hook.inject applies the edits live. Every failure is one line on stderr and exit status 1; the
runtime then stops the container. The system config's parsed TOML is kept between runs, keyed by the
file's identity (cdi.config_cache): most starts import no TOML parser.

Started by the static launcher (clean environment, `python -I -S`) as root in the runtime's
namespaces, with cwd in the bundle. Before reading anything the container controls, it drops every
capability it does not need (bounding, permitted and effective sets) and sets no_new_privs; its
children (the batch child, the ldconfig sandbox) need nothing more.
"""
from __future__ import annotations

import os
import sys

PROG = "nvidia-container-runtime-hook"

# What injection needs: mounts, setns and cgroup device programs (SYS_ADMIN, BPF), reading
# /proc/<pid>/ns of the runtime's non-dumpable init (SYS_PTRACE), walking and writing image
# directories of any owner (DAC_*, FOWNER), and the ldconfig sandbox (SYS_CHROOT, SETPCAP to empty
# its bounding set), creating files in a container with a user namespace as the host ids of its root
# (SETUID, SETGID for setfsuid: libcontainer_c.batch; out of the bounding set, so that nothing the hook
# execs can have them). Lowering rlimits and killing our own children need nothing.
NOT_INHERITED = ("setuid", "setgid")
KEPT_CAPABILITIES = ("sys_admin", "bpf", "sys_ptrace", "dac_override", "dac_read_search", "fowner",
                     "sys_chroot", "setpcap", *NOT_INHERITED)


class UsageError(Exception):
    pass


def parse_argv(argv: list[str]) -> tuple[str, str | None]:
    """(command, config file). Go-style flags as NVIDIA's hook takes them: -config FILE,
    -config=FILE (one or two dashes), -debug (accepted, no effect), -version (command "version":
    print the version and exit, whatever else is given)."""
    command, config, version = None, None, False
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("-"):
            name, has_value, value = arg.lstrip("-").partition("=")
            if name == "debug":
                continue
            if name == "version":
                version = not has_value or value in ("1", "t", "T", "TRUE", "true", "True")  # Go's booleans
                continue
            if name != "config":
                raise UsageError(f"unknown flag {arg!r}")
            if not has_value:
                if i >= len(argv):
                    raise UsageError("flag -config needs a value")
                value = argv[i]
                i += 1
            config = value
        elif command is None:
            command = arg
        else:
            raise UsageError(f"unexpected argument {arg!r}")
    if version:
        return "version", config
    if command is None:
        raise UsageError("missing command: prestart, poststart or poststop")
    return command, config


def drop_privileges() -> None:
    """Keep only KEPT_CAPABILITIES and set no_new_privs (a helper program we exec can never gain
    privileges from a setuid bit or file capabilities). Best effort without CAP_SETPCAP (tests)."""
    from libcontainer_c.privileges import keep_only_capabilities

    keep_only_capabilities(KEPT_CAPABILITIES, NOT_INHERITED)


def load_container(state: dict) -> tuple[dict, str, int]:
    """(config.json, rootfs, pid) of the container the state describes."""
    from hook.cdi_hook import HookError, fix_root_bundle, load_container_config, state_bundle

    bundle = state_bundle(state)
    pid = state.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise HookError("container state has no pid", "stdin")
    oci, rootfs = load_container_config(fix_root_bundle(bundle, pid))
    return oci, rootfs, pid


def prestart(config_file: str | None) -> int:
    from cdi.config import load_config
    from cdi.request import resolve_device_request
    from hook.cdi_hook import read_state

    state = read_state(sys.stdin.buffer)
    oci, rootfs, pid = load_container(state)
    # parsed once per config file (cdi.config_cache), the kept document read without importing json
    config = load_config(config_file, use_cache=True)
    request = resolve_device_request(oci, config)
    if not request.is_gpu_container:
        return 0
    inject_request(request, config, rootfs, pid, config_file)
    return 0


def check_container_init(pid: int) -> None:
    """The state's pid can be a waiting container's init, in a mount namespace of its own: pid 1 is the
    machine's init, and a process of the hook's own mount namespace (the runtime's, the host's) is no
    container's. Injecting there would mount on the host what belongs in the container (nvidia-cdi-hook
    refuses the same: namespace.c)."""
    from hook.cdi_hook import HookError

    if pid == 1:
        raise HookError("the container state's pid is 1, not a container's init: refusing to work in the "
                        "machine's mount namespace", "stdin")
    where = f"/proc/{pid}/ns/mnt"
    try:
        theirs, ours = os.stat(where), os.stat("/proc/self/ns/mnt")
    except OSError as e:
        raise HookError(f"cannot open the container's mount namespace: {e.strerror}", where) from None
    if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
        raise HookError("the container's init shares the hook's mount namespace: refusing to work outside a "
                        "container's", where)


def inject_request(request, config, rootfs: str, pid: int, config_file: str | None = None) -> None:
    from cdi.config import kept_config_dir
    from cdi.driver_root import resolve_driver_root
    from cdi.nvml import load_inventory
    from cdi.selection import select_and_check
    from hook.inject import Target, inject, plan_injection

    cli = config.nvidia_container_cli
    ldconfig = config.host_ldconfig()   # a refused setting fails before the driver is read
    driver_root = resolve_driver_root(None, cli.root)
    inventory = load_inventory(driver_root)
    selection = select_and_check(request, inventory, config.cdi.default_kind)
    plan = plan_injection(driver_root, inventory, selection, request.capabilities,
                          mig_config=request.mig_config, mig_monitor=request.mig_monitor,
                          imex_channels=request.imex_channels, imex_all=request.imex_all,
                          ldconfig=ldconfig, ld_cache=cli.ldcache or None,
                          cache_dir=kept_config_dir(config_file))
    check_container_init(pid)
    inject(plan, Target(rootfs, pid, cgroups=not cli.no_cgroups), warn=_warn)


def _warn(message: str) -> None:
    from cdi.errors import message_line

    print(message_line(PROG, "warning", message), file=sys.stderr)


def _error(message: str) -> int:
    from cdi.errors import message_line

    print(message_line(PROG, "error", message), file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """The program (argv None: sys.argv) or, for tests, one call with explicit arguments."""
    if argv is not None:
        return run(argv)
    # A short-lived process on every container start: the cyclic GC only costs time here (imports
    # allocate much and free little), and so does tearing the interpreter down at exit.
    import gc

    gc.disable()
    code = run(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


USAGE = f"usage: {PROG} [-config FILE] [-debug] [-version] prestart|poststart|poststop   (OCI state on stdin)"


def run(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "-help", "--help"):
        print(USAGE)
        return 0
    try:
        command, config_file = parse_argv(argv)
    except UsageError as e:
        return _error(f"{e} ({USAGE})")
    if command == "version":
        from cdi.version import version_line

        print(version_line(PROG))
        return 0
    if command in ("poststart", "poststop"):
        return 0
    if command != "prestart":
        return _error(f"unknown command {command!r} (expected prestart, poststart or poststop)")
    try:
        drop_privileges()
        return prestart(config_file)
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        return _error(_describe(e))


def _describe(e: Exception) -> str:
    """The one line for an error: cdi, hook and injection errors carry what and where already."""
    from cdi.errors import CdiError, what_where

    if isinstance(e, CdiError):
        return what_where(e.what, e.where)
    if isinstance(e, OSError):
        return what_where(e.strerror or str(e), e.filename or "system call")
    text = str(e)
    if type(e).__name__ in ("HookError", "InjectionError", "ProcViewError") and text:
        return text
    return f"internal error: {type(e).__name__}: {text}"


if __name__ == "__main__":
    sys.exit(main())
