"""Changes to a LIVE container's rootfs, made in its mount namespace by a forked child.

The caller (the prestart hook) never changes namespace: it builds a :class:`RootfsBatch` in Python,
and :meth:`RootfsBatch.run` forks one child, in C, that does ``setns`` on ``/proc/<pid>/ns/mnt``,
opens the rootfs there and runs the operations in order. No Python runs after the fork. Bind sources
are cloned (``open_tree``) here, in the caller's namespace, when the operation is added; the kernel
lets the child attach those trees inside the container's namespace.

On the first failing operation the child unmounts everything it mounted (last first) and
:meth:`run` raises :class:`BatchError` naming the operation, its container path and the errno.
Directories, placeholders and links already made are left (they are harmless empty entries).

    batch = RootfsBatch()
    batch.bind_device("/dev/nvidia0", "/dev/nvidia0", 195, 0)
    batch.bind(host_lib, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54", LIBRARY)
    batch.symlink("libcuda.so.550.54", "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    batch.tmpfs("/proc/driver/nvidia")
    batch.write_file("/proc/driver/nvidia/version", version_text)
    batch.remount("/proc/driver/nvidia", readonly=True)
    batch.run(rootfs=state_rootfs, pid=state_pid)
"""
import os

from ._native import ffi, lib
from .errors import ContainerFsError
from .rootfs import DEVICE_NODE, NODEV, NOEXEC, NOSUID, RDONLY, MountOptions, clone_source

OPERATION_NAMES = {
    lib.GCT_OP_MKDIR: "mkdir -p",
    lib.GCT_OP_FILE: "create placeholder file",
    lib.GCT_OP_DIR: "create placeholder dir",
    lib.GCT_OP_BIND: "bind mount",
    lib.GCT_OP_SYMLINK: "symlink",
    lib.GCT_OP_TMPFS: "mount tmpfs",
    lib.GCT_OP_WRITE_FILE: "write file",
    lib.GCT_OP_REMOUNT: "remount",
    lib.GCT_OP_UMOUNT: "unmount",
}


class BatchError(ContainerFsError):
    """A batch failed. ``index`` is the failed operation's position (-1: the setup, e.g. setns),
    ``operation`` its name (or the setup stage), ``filename`` its container path (or the rootfs)."""

    def __init__(self, errno: int, operation: str, path=None, index: int = -1):
        super().__init__(errno, operation, path)
        self.index = index

    def __reduce__(self):
        return (type(self), (self.errno, self.operation, self.filename, self.index))


class RootfsBatch:
    """An ordered list of rootfs operations, run at once by :meth:`run`. Paths are container paths,
    resolved inside the rootfs (see :mod:`libcontainer_c.rootfs` for what each operation accepts)."""

    def __init__(self):
        self._ops = []      # (kind, path, target, data, src_fd, mode, attr_set, attr_clr, flags)
        self._trees = []    # tree fds we own until close()
        self._ran = False

    def __len__(self) -> int:
        return len(self._ops)

    def _add(self, kind, path, target=None, data=None, src_fd=-1, mode=0, attr_set=0, attr_clr=0,
             if_exists=False):
        flags = lib.GCT_OPF_IF_EXISTS if if_exists else 0
        self._ops.append((kind, os.fsencode(path), target, data, src_fd, mode, attr_set, attr_clr, flags))
        return self

    def mkdirs(self, path, mode: int = 0o755, if_exists: bool = False):
        """mkdir -p; ``if_exists``: only when the parent exists (e.g. inside an optional tmpfs)."""
        return self._add(lib.GCT_OP_MKDIR, path, mode=mode, if_exists=if_exists)

    def make_file(self, path, mode: int = 0o644):
        return self._add(lib.GCT_OP_FILE, path, mode=mode)

    def make_dir(self, path, mode: int = 0o755):
        return self._add(lib.GCT_OP_DIR, path, mode=mode)

    def symlink(self, target, path):
        return self._add(lib.GCT_OP_SYMLINK, path, target=os.fsencode(target))

    def write_file(self, path, data, mode: int = 0o444, if_exists: bool = False):
        """A new file (it must not exist) with ``data`` (bytes or str), e.g. inside a tmpfs.
        ``if_exists``: skip it when the parent directory is missing (parents are made otherwise)."""
        if isinstance(data, str):
            data = data.encode()
        return self._add(lib.GCT_OP_WRITE_FILE, path, data=bytes(data), mode=mode, if_exists=if_exists)

    def bind(self, source, path, options: MountOptions):
        """Bind the host ``source`` (path or fd) onto ``path``; cloned now, in this namespace."""
        tree, _ = clone_source(source, options)
        self._trees.append(tree)
        return self._add(lib.GCT_OP_BIND, path, src_fd=tree, attr_set=options.set, attr_clr=options.clear)

    def bind_device(self, source, path, major: int, minor: int):
        """Bind the host character device ``source`` onto ``path`` with DEVICE_NODE options, after
        checking (on the fd that is cloned) that it is char ``major:minor``; ENODEV otherwise."""
        tree, _ = clone_source(source, DEVICE_NODE, expect_char_device=(major, minor))
        self._trees.append(tree)
        return self._add(lib.GCT_OP_BIND, path, src_fd=tree, attr_set=DEVICE_NODE.set,
                         attr_clr=DEVICE_NODE.clear)

    def tmpfs(self, path, options: str = "mode=0755", readonly: bool = False, if_exists: bool = False):
        """A new tmpfs (nosuid,nodev,noexec) on the directory ``path``. To fill it and then seal it,
        add write_file operations and a ``remount(path, readonly=True)`` after it. ``if_exists``:
        skip it when ``path`` is missing (``/proc/driver/nvidia`` exists only with a driver, and
        procfs refuses mkdir); give the same flag to the write_file and remount that go with it."""
        attrs = NOSUID | NODEV | NOEXEC | (RDONLY if readonly else 0)
        return self._add(lib.GCT_OP_TMPFS, path, data=options.encode(), attr_set=attrs, if_exists=if_exists)

    def remount(self, path, readonly: bool = True, if_exists: bool = False):
        """Make the mount whose root is ``path`` read-only (or read-write)."""
        if readonly:
            return self._add(lib.GCT_OP_REMOUNT, path, attr_set=RDONLY, if_exists=if_exists)
        return self._add(lib.GCT_OP_REMOUNT, path, attr_clr=RDONLY, if_exists=if_exists)

    def unmount(self, path, if_exists: bool = False):
        """Lazily unmount the mount whose root is ``path``, e.g. to undo an earlier batch after a
        later step failed (``path`` missing or nothing mounted there: no error). ``if_exists``: skip
        it when the parent directory is missing."""
        return self._add(lib.GCT_OP_UMOUNT, path, if_exists=if_exists)

    def run(self, rootfs, pid: int = None) -> None:
        """Run every operation in a forked child; ``rootfs`` is the host path of the container's
        root as seen in its mount namespace, ``pid`` a process in that namespace (None: this
        process's namespace). Raises BatchError on the first failure, after the rollback.
        A batch runs once: its cloned trees are attached by then, and attaching one again would move
        that mount."""
        if self._ran:
            raise RuntimeError("a RootfsBatch runs only once; build a new one")
        self._ran = True
        keep = []  # cffi buffers must outlive the call
        ops = ffi.new("struct gct_op[]", max(len(self._ops), 1))
        for op, (kind, path, target, data, src_fd, mode, attr_set, attr_clr, flags) in zip(ops, self._ops):
            op.kind, op.src_fd, op.mode, op.attr_set, op.attr_clr = kind, src_fd, mode, attr_set, attr_clr
            op.flags = flags
            op.path = _buffer(path, keep)
            if target is not None:
                op.target = _buffer(target, keep)
            if data is not None:
                op.data = _buffer(data, keep)
                op.data_len = len(data)
        mounts = ffi.new("int[]", max(len(self._ops), 1))
        error = ffi.new("struct gct_batch_error *")
        ns_fd = -1
        if pid is not None:
            try:
                ns_fd = os.open(f"/proc/{int(pid)}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as err:
                raise BatchError(err.errno, "open mount namespace", f"/proc/{pid}/ns/mnt") from None
        fs_uid, fs_gid = container_root_ids(pid) if pid is not None else (-1, -1)
        try:
            rc = lib.gct_run_batch(ns_fd, os.fsencode(rootfs), fs_uid, fs_gid, ops, len(self._ops), mounts, error)
        finally:
            if ns_fd >= 0:
                os.close(ns_fd)
        if rc < 0:
            raise _batch_error(error, rootfs)

    def close(self) -> None:
        """Release the cloned bind sources (attached mounts stay; unattached clones vanish)."""
        while self._trees:
            os.close(self._trees.pop())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def container_root_ids(pid: int) -> tuple[int, int]:
    """(uid, gid) on the host of the root of pid's user namespace, what the batch creates files as; -1
    each when pid shares ours (or no root is mapped there). In a container with a user namespace of its
    own, the file systems the runtime mounted there (the /dev tmpfs) refuse to create a file for the
    host's root, whose ids they cannot map (EOVERFLOW), and the container's root could not own what is
    created for it."""
    ids = ffi.new("long[2]")
    lib.gct_container_root_ids(int(pid), ids, ids + 1)
    return ids[0], ids[1]


def _buffer(data: bytes, keep: list):
    buf = ffi.new("char[]", data)
    keep.append(buf)
    return buf


def _batch_error(error, rootfs) -> BatchError:
    index = error.index
    if index >= 0:
        operation = OPERATION_NAMES.get(error.kind, f"operation {error.kind}")
        if error.err == 18 and error.kind in (lib.GCT_OP_BIND, lib.GCT_OP_TMPFS):  # EXDEV
            operation += " refused: the target is on a shared mount (it would propagate out of the container)"
        return BatchError(error.err, operation, ffi.string(error.path), index)
    stage = ffi.string(error.stage).decode()
    return BatchError(error.err, stage, ffi.string(error.path) or os.fsencode(rootfs), index)
