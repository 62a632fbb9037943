"""Safe operations on a container's root filesystem, whose content the image's author controls.

Every container path is resolved inside the root by the kernel (``openat2`` with ``RESOLVE_IN_ROOT |
RESOLVE_NO_MAGICLINKS``): absolute symlinks and ``..`` stay inside the root, ``/proc/self/...`` magic
links are refused. Mounts go by file descriptor (``open_tree`` + ``move_mount``) with their flags set
before they become visible, and always with private propagation.

    with Rootfs("/run/bundle/rootfs") as root:
        mounts = MountStack()
        with mounts:                       # unmounts everything again if the block raises
            mounts.push(root.bind_device("/dev/nvidia0", "/dev/nvidia0", 195, 0))
            mounts.push(root.bind(lib, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", LIBRARY))
            root.symlink("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so")

Errors are :class:`~libcontainer_c.errors.ContainerFsError` carrying errno, the operation and the path.
Every int fd a function here returns is close-on-exec and must be closed by the caller (``os.close``).
"""
import os
import stat

from ._native import ffi, lib
from .errors import ContainerFsError

ABI_VERSION = 6
if lib.gct_abi_version() != ABI_VERSION:  # a stale build of the C module next to newer Python code
    raise ImportError(f"libcontainer_c._native has ABI {lib.gct_abi_version()}, expected {ABI_VERSION}")

RDONLY = lib.GCT_ATTR_RDONLY
NOSUID = lib.GCT_ATTR_NOSUID
NODEV = lib.GCT_ATTR_NODEV
NOEXEC = lib.GCT_ATTR_NOEXEC
_ATTR_NAMES = {"ro": RDONLY, "nosuid": NOSUID, "nodev": NODEV, "noexec": NOEXEC}


def check(rc: int, operation: str, path=None) -> int:
    """Return ``rc``, or raise ContainerFsError from the C errno when ``rc`` is negative."""
    if rc < 0:
        raise ContainerFsError(ffi.errno, operation, path)
    return rc


def in_own_mount_namespace() -> bool:
    """Whether this process's mount namespace differs from its parent's (the one `unshare --mount`
    made): the programs that mount over /dev or /dev/shm of the namespace they run in check this
    first, so that run directly they never change the caller's."""
    try:
        return os.readlink("/proc/self/ns/mnt") != os.readlink(f"/proc/{os.getppid()}/ns/mnt")
    except OSError:
        return False


def _check_mount(rc: int, operation: str, path) -> int:
    """check() for an attach, whose EXDEV means the target lies on a shared mount."""
    if rc < 0 and ffi.errno == 18:
        raise ContainerFsError(18, f"{operation} refused: the target is on a shared mount "
                               "(it would propagate out of the container)", path)
    return check(rc, operation, path)


def _b(path) -> bytes:
    return os.fsencode(path)


def _open_root(path, pid) -> int:
    if pid is None:
        return check(lib.gct_open_root(_b(path)), "open root", path)
    base = f"/proc/{int(pid)}/root"
    try:
        fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise ContainerFsError(err.errno, "open root", base) from None
    try:
        return check(lib.gct_resolve(fd, _b(path), os.O_PATH | os.O_DIRECTORY), "open root",
                     f"{base}/{os.fsdecode(path).lstrip('/')}")
    finally:
        os.close(fd)


class MountOptions:
    """Flags for a bind mount: ``set`` and ``clear`` are GCT attribute bits (RDONLY, NOSUID, NODEV,
    NOEXEC); bits in neither keep the value of the source mount. ``recursive`` clones submounts too.
    Prefer the presets below; :func:`validate_bind` refuses combinations that break what is mounted.
    """
    __slots__ = ("set", "clear", "recursive", "name")

    def __init__(self, set_flags=(), clear_flags=(), recursive=True, name="custom"):
        self.set = _bits(set_flags)
        self.clear = _bits(clear_flags)
        if self.set & self.clear:
            raise ValueError(f"mount options {name}: a flag is both set and cleared")
        self.recursive = recursive
        self.name = name

    def __repr__(self) -> str:
        return f"MountOptions({self.name}: set={self.set:#x} clear={self.clear:#x})"


def _bits(flags) -> int:
    if isinstance(flags, int):
        return flags
    bits = 0
    for flag in flags:
        if flag not in _ATTR_NAMES:
            raise ValueError(f"unknown mount flag {flag!r} (known: {', '.join(_ATTR_NAMES)})")
        bits |= _ATTR_NAMES[flag]
    return bits


# A device node with nodev cannot be opened (EACCES), so the preset clears it even if the host's
# /dev has it. Libraries and binaries must stay executable: their presets clear noexec.
DEVICE_NODE = MountOptions(("ro", "nosuid", "noexec"), ("nodev",), recursive=False, name="device node")
LIBRARY = MountOptions(("ro", "nosuid", "nodev"), ("noexec",), recursive=False, name="library")
BINARY = MountOptions(("ro", "nosuid", "nodev"), ("noexec",), recursive=False, name="binary")
READONLY_FILES = MountOptions(("ro", "nosuid", "nodev", "noexec"), recursive=True, name="read-only files")
IPC_SOCKET = MountOptions(("nosuid", "nodev", "noexec"), recursive=False, name="ipc socket")
WRITABLE_DIR = MountOptions(("nosuid", "nodev", "noexec"), recursive=True, name="writable dir")

_ELF_MAGIC = b"\x7fELF"


def validate_bind(source_fd: int, options: MountOptions, source_path) -> os.stat_result:
    """Check that ``options`` suit the source open at ``source_fd``; return its stat.

    Refuses ``nodev`` for a device node and ``noexec`` for an ELF file or a file with an exec bit
    (a library or binary mounted noexec fails in the container in ways that are hard to trace).
    """
    st = os.fstat(source_fd)
    mode = st.st_mode
    if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) and options.set & NODEV:
        raise ValueError(f"device node {os.fsdecode(source_path)} cannot be mounted nodev")
    if stat.S_ISREG(mode) and options.set & NOEXEC:
        executable = mode & 0o111
        if not executable:
            fd = os.open(f"/proc/self/fd/{source_fd}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                executable = os.read(fd, 4) == _ELF_MAGIC
            finally:
                os.close(fd)
        if executable:
            raise ValueError(f"executable or library {os.fsdecode(source_path)} cannot be mounted noexec")
    return st


def clone_source(source, options: MountOptions, expect_char_device=None):
    """Open a host file or directory and clone it into a detached mount tree (``open_tree``).

    ``source`` is a host path (symlinks followed: the host is trusted) or an open fd (e.g. one from
    ``Rootfs(driver_root).open(path)`` when the files come from a driver root that is itself a
    container's filesystem). ``expect_char_device=(major, minor)`` checks, on the very fd that is
    cloned, that the source is that character device (ENODEV otherwise). Returns ``(tree_fd,
    stat_result)`` after :func:`validate_bind`. The tree is not visible anywhere until it is
    attached; closing ``tree_fd`` unattached discards it.
    """
    if isinstance(source, int):
        src_fd = os.dup(source)
    else:
        try:
            src_fd = os.open(source, os.O_PATH | os.O_CLOEXEC)
        except OSError as err:
            raise ContainerFsError(err.errno, "open bind source", source) from None
    try:
        st = validate_bind(src_fd, options, source)
        if expect_char_device is not None:
            _check_char_device(st, expect_char_device, source)
        tree = check(lib.gct_clone_tree(src_fd, ffi.NULL, int(options.recursive)), "open_tree", source)
    finally:
        os.close(src_fd)
    return tree, st


def _check_char_device(st: os.stat_result, expected, source) -> None:
    major, minor = expected
    if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (major, minor):
        found = (f"char {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if stat.S_ISCHR(st.st_mode)
                 else "not a char device")
        raise ContainerFsError(19, f"check device node (want char {major}:{minor}, found {found})", source)


class Mount:
    """A mount this process attached; :meth:`unmount` takes it away again (lazily, MNT_DETACH).

    Holds an fd of the mount's root, so unmounting hits exactly this mount even if the container path
    was changed or something was mounted over it since.
    """
    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path):
        self.fd = fd
        self.path = path

    def unmount(self) -> None:
        if self.fd < 0:
            return
        try:
            check(lib.gct_umount_fd(self.fd), "umount", self.path)
        finally:
            self.close()

    def close(self) -> None:
        """Forget the mount without unmounting it (it stays attached)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"Mount({os.fsdecode(self.path)!r}, fd={self.fd})"


class MountStack:
    """Rollback for a series of mounts: as a context manager, unmounts everything pushed (last
    first) when the block raises, and keeps the mounts (closing their fds) when it succeeds."""

    def __init__(self):
        self.mounts = []

    def push(self, mount: Mount) -> Mount:
        self.mounts.append(mount)
        return mount

    def rollback(self) -> None:
        """Unmount everything pushed, last first; the first failure is raised after trying all."""
        first = None
        while self.mounts:
            try:
                self.mounts.pop().unmount()
            except ContainerFsError as err:
                first = first or err
        if first is not None:
            raise first

    def release(self) -> None:
        while self.mounts:
            self.mounts.pop().close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.release()
        else:
            self.rollback()
        return False


class Rootfs:
    """An open root directory; every path given to a method is a path inside it.

    The root itself is trusted (it comes from the runtime's state, not from the image); what is
    inside it is not. Use as a context manager or call :meth:`close`.

    ``pid``: open the root as the container's mount namespace sees it, as ``path`` resolved inside
    ``/proc/<pid>/root`` (RESOLVE_IN_ROOT, no magic links): before pivot_root the init's root is
    the root of its namespace, where the rootfs path is the runtime's. What the container's
    namespace has mounted inside the rootfs (a volume over /etc) is then what this root shows; the
    caller's own namespace may have the bare directory there instead. None: this process's view.
    """

    def __init__(self, path, pid: int = None):
        self.path = path
        self.pid = pid
        self.fd = _open_root(path, pid)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def fileno(self) -> int:
        return self.fd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def open(self, path, flags: int = os.O_PATH) -> int:
        """Open ``path`` inside the root with open(2) ``flags`` (no O_CREAT/O_TRUNC); returns an fd."""
        return check(lib.gct_resolve(self.fd, _b(path), flags), "resolve", path)

    def stat(self, path, follow_symlinks: bool = True) -> os.stat_result:
        """stat of ``path`` resolved inside the root (``follow_symlinks=False``: lstat of the last part)."""
        flags = os.O_PATH if follow_symlinks else os.O_PATH | os.O_NOFOLLOW
        fd = self.open(path, flags)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def exists(self, path) -> bool:
        """Whether ``path`` resolves inside the root (ENOENT/ENOTDIR/ELOOP: False; other errors raise)."""
        try:
            os.close(self.open(path))
        except ContainerFsError as err:
            if err.errno in (2, 20, 40):  # ENOENT, ENOTDIR, ELOOP
                return False
            raise
        return True

    def mkdirs(self, path, mode: int = 0o755) -> None:
        """mkdir -p ``path`` inside the root (existing directories and symlinks to them are fine)."""
        os.close(check(lib.gct_mkdir_p(self.fd, _b(path), mode), "mkdir -p", path))

    def make_file(self, path, mode: int = 0o644) -> int:
        """Create (or reuse) the regular file ``path`` as a mount target; returns its fd.

        Parents are created. The last component is never followed: a symlink there raises ELOOP, a
        directory EISDIR, a device or other special file EEXIST.
        """
        return check(lib.gct_placeholder_file(self.fd, _b(path), mode), "create placeholder file", path)

    def make_dir(self, path, mode: int = 0o755) -> int:
        """Create (or reuse) the directory ``path`` as a mount target; returns its fd.

        A symlink as the last component raises ELOOP, any other non-directory ENOTDIR.
        """
        return check(lib.gct_placeholder_dir(self.fd, _b(path), mode), "create placeholder dir", path)

    def symlink(self, target, linkpath) -> None:
        """Make ``linkpath -> target`` inside the root (parents created). An existing symlink is
        replaced atomically; a directory raises EISDIR, any other existing file EEXIST.
        ``target`` is stored as given: it is resolved later, by the container, inside its root."""
        check(lib.gct_symlink(self.fd, _b(target), _b(linkpath)), "symlink", linkpath)

    def bind(self, source, path, options: MountOptions) -> Mount:
        """Bind-mount the host ``source`` (path or fd) onto ``path`` inside the root.

        The target placeholder is a file or a directory to match the source. The returned Mount
        unmounts it again; push it on a MountStack for rollback.
        """
        tree, st = clone_source(source, options)
        return self._attach(tree, stat.S_ISDIR(st.st_mode), path, options)

    def bind_device(self, source, path, major: int, minor: int) -> Mount:
        """Bind the host character device ``source`` onto ``path`` (DEVICE_NODE options: ro, nosuid,
        noexec, never nodev) after checking it is char ``major:minor``."""
        tree, _ = clone_source(source, DEVICE_NODE, expect_char_device=(major, minor))
        return self._attach(tree, False, path, DEVICE_NODE)

    def _attach(self, tree: int, is_dir: bool, path, options: MountOptions) -> Mount:
        """Attach a cloned tree on a placeholder at path; the tree fd is closed on failure."""
        try:
            target = self.make_dir(path) if is_dir else self.make_file(path)
            try:
                _check_mount(lib.gct_bind_tree(self.fd, tree, target, options.set, options.clear),
                             "bind mount", path)
            finally:
                os.close(target)
        except BaseException:
            os.close(tree)
            raise
        return Mount(tree, path)

    def unmount(self, path) -> None:
        """Lazily unmount the mount whose root is ``path`` (resolved inside the root, the last
        component not followed). EINVAL when nothing is mounted exactly there."""
        fd = check(lib.gct_resolve(self.fd, _b(path), os.O_PATH | os.O_NOFOLLOW), "resolve", path)
        try:
            check(lib.gct_umount_fd(fd), "umount", path)
        finally:
            os.close(fd)

    def mount_tmpfs(self, path, options: str = "mode=0755", readonly: bool = False) -> Mount:
        """Mount a new tmpfs (nosuid,nodev,noexec) on the directory ``path`` inside the root."""
        attrs = NOSUID | NODEV | NOEXEC | (RDONLY if readonly else 0)
        target = self.make_dir(path)
        try:
            fd = _check_mount(lib.gct_mount_tmpfs(self.fd, target, options.encode(), attrs), "mount tmpfs", path)
        finally:
            os.close(target)
        return Mount(fd, path)
