"""Looking at files inside a driver root without ever leaving it.

A driver root is "/" on a normal host, or a directory holding a driver installation (a driver
container's rootfs, the simulated host). Its symlinks are written by whoever built that tree, so
every path is resolved one component at a time as if the root were "/": an absolute link target
restarts at the root, `..` stops at the root, and after MAX_SYMLINKS links the walk gives up, as
openat2(RESOLVE_IN_ROOT) does. The result is a canonical path inside the root whose host form
(root + path) contains no symlink below the root.

This reads the admin's driver root on the discovery side, in pure Python; injecting into a
container's rootfs (which an image controls, and where races matter) goes through the C helper.
"""
from __future__ import annotations

import errno
import os
import stat

from cdi.errors import CdiError

MAX_SYMLINKS = 40   # the kernel's limit for one path walk

# A driver root holding this file is a simulated GPU host (`nvidia-ctk simulate create`): it also
# supplies the dev/, proc/ and sys/ of its driver. An unmarked root (a real containerized driver at
# e.g. /run/nvidia/driver) does not: its device nodes and kernel files are the host's, under /.
SIMULATED_HOST_MARKER = ".nvidia-simulated-host.json"
DRIVER_ROOT_ENV = "NVIDIA_CTK_DRIVER_ROOT"

# Errors that mean "there is no such file here" rather than "something is wrong" (also the rule of
# cdi.driver_files_cache, which asks the same paths again).
MISSING_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG)


class DriverRootError(CdiError):
    """The driver root itself is unusable, or a path inside it cannot be resolved."""


class SymlinkLoopError(DriverRootError):
    """Too many symlinks while resolving a path: a loop, or a deliberately long chain."""


class DriverRoot:
    """`dev_root`: where the driver's dev/ is, when not where system_root says (`cdi generate
    --dev-root`: a driver container whose nodes are in its own rootfs). `library_search_paths`:
    folders inside the root also searched for driver libraries that its ld.so.cache does not list
    (`cdi generate --library-search-path`)."""

    def __init__(self, root: str, *, dev_root: str | None = None, library_search_paths: tuple[str, ...] = ()):
        self.path = _directory(root, "driver root")
        self.dev_root = _directory(dev_root, "dev root") if dev_root else None
        self.library_search_paths = tuple(library_search_paths)

    def __repr__(self) -> str:
        return f"DriverRoot({self.path!r})"

    @property
    def is_simulated(self) -> bool:
        """True for a simulated host's root (marker file present; "/" never counts)."""
        return self.path != "/" and os.path.isfile(os.path.join(self.path, SIMULATED_HOST_MARKER))

    @property
    def system_root(self) -> str:
        """Where this driver's dev/, proc/ and sys/ live: inside a simulated root, else "/"."""
        return self.path if self.is_simulated else "/"

    def dev_path(self, name: str) -> str:
        """Host path of a device node, e.g. dev_path("nvidiactl") or dev_path("nvidia-caps/nvidia-cap1")."""
        return os.path.join(self.dev_root or self.system_root, "dev", name.lstrip("/"))

    def proc_path(self, name: str) -> str:
        """Host path of a /proc file, e.g. proc_path("driver/nvidia-caps/mig-minors")."""
        return os.path.join(self.system_root, "proc", name.lstrip("/"))

    def sys_path(self, name: str) -> str:
        return os.path.join(self.system_root, "sys", name.lstrip("/"))

    def host_path(self, path_in_root: str) -> str:
        """The host's name for a canonical path inside the root ("/usr/lib" -> root + "/usr/lib")."""
        if self.path == "/":
            return path_in_root
        return self.path + path_in_root if path_in_root != "/" else self.path

    def resolve(self, path: str) -> str | None:
        """Canonical absolute path inside the root for `path`, or None if it does not exist.

        Relative paths are taken from the root, like absolute ones. Raises SymlinkLoopError after
        MAX_SYMLINKS links and DriverRootError for errors other than "not there"."""
        pending = _components(path)
        parts: list[str] = []
        followed = 0
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if parts:       # `parts` never holds a symlink, so popping is exact
                    parts.pop()
                continue
            candidate = "/" + "/".join(parts + [name])
            st = self._lstat(candidate)
            if st is None:
                return None
            if stat.S_ISLNK(st.st_mode):
                followed += 1
                if followed > MAX_SYMLINKS:
                    raise SymlinkLoopError("too many levels of symbolic links",
                                           f"{path} in driver root {self.path}")
                target = self._readlink(candidate)
                if target.startswith("/"):
                    parts = []
                pending.extend(_components(target))
                continue
            if not stat.S_ISDIR(st.st_mode) and any(p not in ("", ".") for p in pending):
                return None     # a non-directory in the middle of the path: ENOTDIR
            parts.append(name)
        return "/" + "/".join(parts)

    def stat(self, path_in_root: str) -> os.stat_result | None:
        """lstat of a canonical path (from resolve): never follows a link."""
        return self._lstat(path_in_root)

    def listdir(self, path_in_root: str) -> list[str]:
        """Sorted entries of a canonical directory path; [] when it is missing."""
        try:
            fd = os.open(self.host_path(path_in_root),
                         os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if e.errno in MISSING_ERRNOS or e.errno == errno.ELOOP:
                return []
            raise DriverRootError(f"cannot list directory: {e.strerror or e}",
                                  self.host_path(path_in_root)) from None
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def open_file(self, path_in_root: str) -> int:
        """Open a canonical path read-only without following a final symlink; returns the fd."""
        host = self.host_path(path_in_root)
        try:
            return os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            raise DriverRootError(f"cannot open: {e.strerror or e}", host) from None

    def _lstat(self, path_in_root: str) -> os.stat_result | None:
        host = self.host_path(path_in_root)
        try:
            return os.lstat(host)
        except OSError as e:
            if e.errno in MISSING_ERRNOS:
                return None
            raise DriverRootError(f"cannot stat: {e.strerror or e}", host) from None

    def _readlink(self, path_in_root: str) -> str:
        host = self.host_path(path_in_root)
        try:
            return os.readlink(host)
        except OSError as e:
            raise DriverRootError(f"cannot read link: {e.strerror or e}", host) from None


def resolve_driver_root(cli_value: str | None = None, config_root: str | None = None,
                        environ: dict | None = None) -> DriverRoot:
    """The driver root to use: `--driver-root`, else $NVIDIA_CTK_DRIVER_ROOT, else config.toml's
    `[nvidia-container-cli] root` (passed in by the caller), else "/". Empty values are skipped."""
    environ = os.environ if environ is None else environ
    for value, where in ((cli_value, "--driver-root"), (environ.get(DRIVER_ROOT_ENV), DRIVER_ROOT_ENV),
                         (config_root, "nvidia-container-cli.root")):
        if value:
            try:
                return DriverRoot(value)
            except DriverRootError as e:
                raise DriverRootError(e.what, f"{value}, from {where}") from None
    return DriverRoot("/")


def _directory(root: str, what: str) -> str:
    if not root:
        raise DriverRootError(f"{what} is empty")
    # abspath, not realpath: the admin's spelling of the root (e.g. /run/nvidia/driver) is
    # what users expect in host paths; the root itself is trusted, what lies below is not.
    path = os.path.abspath(root)
    try:
        st = os.stat(path)
    except OSError as e:
        raise DriverRootError(f"cannot use {what}: {e.strerror or e}", root) from None
    if not stat.S_ISDIR(st.st_mode):
        raise DriverRootError(f"{what} is not a directory", root)
    return path


def _components(path: str) -> list[str]:
    """Path components in reverse order, so that pop() yields the next one."""
    return path.split("/")[::-1]
