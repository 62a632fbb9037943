"""Run an MPS control daemon with a /dev/shm of its own (what cdi.mps_daemon starts under unshare):

    unshare --mount --propagation private python -I -m cdi.mps_namespace SHM -- CONTROL -d

bind-mounts the folder SHM (the device's tmpfs) onto /dev/shm of this private mount namespace, then
execs CONTROL with the environment it was given. The daemon and the servers it starts live in this
namespace, so their shared memory is the tmpfs the device's containers get as their /dev/shm; the
host's /dev/shm is never touched. Run directly, it refuses to change the caller's own namespace.
"""
from __future__ import annotations

import os
import sys

from cdi.errors import message_line, what_where


def _error(text: str) -> int:
    print(message_line("nvidia-ctk", "error", text), file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m cdi.mps_namespace SHM -- CONTROL [ARGS...] (in a private mount namespace)",
              file=sys.stderr)
        return 2
    shm, command = argv[0], argv[2:]
    from libcontainer_c.errors import ContainerFsError
    from libcontainer_c.rootfs import WRITABLE_DIR, Rootfs, in_own_mount_namespace

    if not in_own_mount_namespace():
        return _error(what_where("refusing to change the mount namespace of the calling process",
                                 "/proc/self/ns/mnt"))

    try:
        with Rootfs("/") as fs:
            fs.bind(shm, "/dev/shm", WRITABLE_DIR).close()
    except ContainerFsError as e:
        return _error(what_where(f"cannot mount the MPS shm on /dev/shm: {e.strerror}", shm))
    try:
        os.execve(command[0], command, dict(os.environ))
    except OSError as e:
        return _error(what_where(f"cannot run the MPS control daemon: {e.strerror}", command[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
