"""A simulated host seen at the host's own paths, in a private mount namespace.

    nvidia-ctk simulate exec DIR -- nvidia-ctk cdi generate
    python -m simulator.namespace DIR -- CMD [ARGS...]      (what `simulate exec` runs, under unshare)

Our programs take a driver root (`--driver-root DIR`) and read the simulated host's dev/, proc/ and
sys/ through it. Other tools read the real paths: NVIDIA's nvidia-ctk looks for
/proc/driver/nvidia-caps/mig-minors, /dev/nvidia*, /dev/dri and /sys/bus/pci/devices/<bus>/drm, and
pynvml scripts load libnvidia-ml.so.1 by name. This runs such a tool in a mount namespace of its own
(util-linux `unshare --mount --propagation private`), where

- /dev is a tmpfs holding the host's /dev entries (each bind-mounted, links copied) plus the simulated
  host's nodes (nvidia*, nvidia-caps/, nvidia-caps-imex-channels/, dri/), which replace the host's
  of the same name;
- /proc/driver is a tmpfs with links to the simulated host's proc/driver/nvidia and nvidia-caps (the
  host's other /proc/driver entries are not there);
- /sys/bus/pci/devices is a tmpfs with the host's links plus links to the simulated GPUs' PCI
  directories (vendor, device, class, drm/);
- LD_LIBRARY_PATH starts with the simulated host's library folder, so libnvidia-ml.so.1 is its NVML,
  and PATH with its usr/bin (nvidia-smi).

Every mount goes through libcontainer_c (Rootfs("/"): paths resolved by the kernel, mounts by fd).
Nothing outside the namespace changes: the host's /dev, /proc and /sys are never written (a node
made in the host's /dev, a devtmpfs, would appear on the host whatever the namespace).
"""
from __future__ import annotations

import os
import stat
import sys

from cdi.errors import message_line, what_where
from simulator.driver_files import BIN_DIR, LIB64_DIR
from simulator.host_spec import MARKER_NAME
from simulator.host_spec import SimulatorError

# The simulated host's device nodes and folders of them, in its dev/.
DEV_PREFIXES = ("nvidia", "dri")
PROC_DRIVER_ENTRIES = ("nvidia", "nvidia-caps")
PCI_DEVICES = "/sys/bus/pci/devices"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def exec_argv(root: str, command: list[str]) -> list[str]:
    """The argv that runs `command` against the simulated host at root (see the module docstring)."""
    return ["unshare", "--mount", "--propagation", "private",
            sys.executable, "-I", "-m", "simulator.namespace", root, "--", *command]


def check_root(root: str) -> str:
    root = os.path.abspath(root)
    if not os.path.isfile(os.path.join(root, MARKER_NAME)):
        raise SimulatorError("not a simulated host (no marker file)", root)
    return root


def _entries(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def _copy_dir_entries(fs, old_fd: int, names, target: str, options) -> None:
    """Each entry of the folder old_fd (opened before target was covered) at target/<name>: links
    copied, everything else bind-mounted (with its submounts: /dev/pts, /dev/shm ...)."""
    for name in names:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=old_fd)
        try:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                fs.symlink(os.readlink(name, dir_fd=old_fd), f"{target}/{name}")
            else:
                fs.bind(fd, f"{target}/{name}", options)
        finally:
            os.close(fd)


def _simulated_dev(fs, root: str, keep) -> None:
    old = os.open("/dev", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        simulated = [n for n in _entries(f"{root}/dev") if n.startswith(DEV_PREFIXES)]
        host = [n for n in _entries("/dev") if n not in simulated]
        fs.mount_tmpfs("/dev", "mode=0755")
        _copy_dir_entries(fs, old, host, "/dev", keep)
    finally:
        os.close(old)
    sim = os.open(f"{root}/dev", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _copy_dir_entries(fs, sim, simulated, "/dev", keep)
    finally:
        os.close(sim)


def _links_over(fs, path: str, host_names: list[str], old_fd: int, simulated: dict[str, str]) -> None:
    """A tmpfs on path holding the host's links (from old_fd) and links to the simulated entries."""
    fs.mount_tmpfs(path, "mode=0755")
    for name in host_names:
        if name not in simulated:
            fs.symlink(os.readlink(name, dir_fd=old_fd), f"{path}/{name}")
    for name, target in simulated.items():
        fs.symlink(target, f"{path}/{name}")


def enter(root: str) -> None:
    """Set up this process's (private) mount namespace for the simulated host at root."""
    from libcontainer_c.errors import ContainerFsError
    from libcontainer_c.rootfs import MountOptions, Rootfs

    keep = MountOptions((), (), recursive=True, name="host entry")   # the source's own flags
    try:
        with Rootfs("/") as fs:
            _simulated_dev(fs, root, keep)
            drivers = {n: f"{root}/proc/driver/{n}" for n in PROC_DRIVER_ENTRIES
                       if os.path.isdir(f"{root}/proc/driver/{n}")}
            fs.mount_tmpfs("/proc/driver", "mode=0755")   # procfs takes no new entries: a tmpfs over it
            for name, target in drivers.items():
                fs.symlink(target, f"/proc/driver/{name}")
            old = os.open(PCI_DEVICES, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                gpus = {n: f"{root}{PCI_DEVICES}/{n}" for n in _entries(f"{root}{PCI_DEVICES}")}
                # the host's entries are relative links (../../../devices/...): they still reach sysfs
                host = [n for n in _entries(PCI_DEVICES) if stat.S_ISLNK(os.lstat(f"{PCI_DEVICES}/{n}").st_mode)]
                _links_over(fs, PCI_DEVICES, host, old, gpus)
            finally:
                os.close(old)
    except ContainerFsError as e:
        raise SimulatorError(f"cannot show the simulated host: {e.operation}: {e.strerror}",
                             e.filename or root) from None


def check_private_namespace() -> None:
    """Covering /dev in the caller's own mount namespace would take the host's /dev away: only run
    in a namespace other than the parent's (the one `unshare` made)."""
    from libcontainer_c.rootfs import in_own_mount_namespace

    if not in_own_mount_namespace():
        raise SimulatorError("refusing to change the mount namespace of the calling process "
                             "(run it through `nvidia-ctk simulate exec`)", "/proc/self/ns/mnt")


def _error(text: str) -> None:
    # the directory and the command are the caller's words: the one line builder escapes them
    print(message_line("nvidia-ctk", "error", text), file=sys.stderr)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m simulator.namespace DIR -- CMD [ARGS...] (in a private mount namespace)",
              file=sys.stderr)
        return 2
    root, command = argv[0], argv[2:]
    try:
        root = check_root(root)
        check_private_namespace()
        enter(root)
    except SimulatorError as e:
        _error(what_where(e.what, e.where))
        return 1
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (f"{root}/{LIB64_DIR}", env.get("LD_LIBRARY_PATH")) if p)
    env["PATH"] = ":".join(p for p in (f"{root}/{BIN_DIR}", env.get("PATH") or DEFAULT_PATH) if p)
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        _error(what_where(f"cannot run {command[0]!r}: {e.strerror}", "simulate exec"))
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
