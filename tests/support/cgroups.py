"""Cgroups for device-cgroup tests: a private cgroup removed afterwards, and a child that tries to open
nodes from inside one. A char node 195:x with no driver behind it answers ENXIO when the cgroup allows
it and EPERM when it does not (docs/reference.md#device-cgroup), so the test can read the verdict from errno."""
from __future__ import annotations

import contextlib
import errno
import os
import time
import uuid
from typing import Iterator


def major_is_free(major: int) -> bool:
    """No driver holds this char major (so an allowed open gives ENXIO, never a real device)."""
    with open("/proc/devices") as f:
        return not any(line.split()[:1] == [str(major)] for line in f)


@contextlib.contextmanager
def temporary_cgroup(hierarchy: str) -> Iterator[str]:
    """Yield the name of a new cgroup `gct-test-<random>` directly under hierarchy; removed on exit
    (with whatever the kernel attached to it)."""
    name = f"gct-test-{uuid.uuid4().hex[:12]}"
    path = os.path.join(hierarchy, name)
    os.mkdir(path)
    try:
        yield name
    finally:
        for _ in range(50):  # the last child may take a moment to leave
            try:
                os.rmdir(path)
                break
            except OSError as err:
                if err.errno != errno.EBUSY:
                    raise
                time.sleep(0.05)


def open_errnos_in(cgroup_dir: str, paths, flags: int = os.O_RDWR) -> list[int]:
    """errno of open() of each path by one child placed in the cgroup at cgroup_dir (0: it opened)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            codes = []
            for path in paths:
                try:
                    os.close(os.open(path, flags))
                    codes.append(0)
                except OSError as err:
                    codes.append(err.errno)
            os.write(wfd, ",".join(map(str, codes)).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    data = os.read(rfd, 4096).decode()
    os.close(rfd)
    os.waitpid(pid, 0)
    if not data:
        raise AssertionError(f"the child could not join {cgroup_dir} or open the nodes")
    return [int(c) for c in data.split(",")]


def remove_cgroup_everywhere(name: str, root: str = "/sys/fs/cgroup") -> None:
    """rmdir the cgroup `name` (and its empty children) in every hierarchy: the parent cgroup an engine
    makes for a namespace (containerd: /<namespace>/<id>) and never removes. A cgroup that still has
    processes stays (rmdir fails with EBUSY) and so does everything above it."""
    for hierarchy in os.listdir(root):
        top = os.path.join(root, hierarchy, name)
        if not os.path.isdir(top) or os.path.islink(os.path.join(root, hierarchy)):
            continue
        for dirpath, _, _ in sorted(os.walk(top), key=lambda entry: len(entry[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
