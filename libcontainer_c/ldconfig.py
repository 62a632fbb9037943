"""The one sandboxed ldconfig runner: updates a container's /etc/ld.so.cache with the HOST's ldconfig.

The binary is opened here, in the caller's namespace, before anything is entered, so an image can
never substitute its own, and must be a static executable (the C helper's gct_open_static_executable,
which nvidia-cdi-hook, a C program, calls too; the limits are the C header's GCT_LDCONFIG_*). A
forked child (C, no Python) then joins the container's mount namespace (``pid``; None = stay in
this one, as nvidia-cdi-hook already is in the container's), takes a private copy of it,
hides a procfs mounted in the rootfs, chroots into the rootfs, sets resource limits, drops every
capability (bounding set included, securebits locked so uid 0 regains nothing on exec), sets
no_new_privs and executes the binary from its fd with an empty environment.

Capabilities: ldconfig keeps none; it runs as uid 0 inside the rootfs. When the root has a /proc
directory it writes its cache on a scratch tmpfs there, and the C helper (gct_update_ld_cache, the same
for nvidia-cdi-hook) puts it in /etc/ld.so.cache, with this process's privileges (fd-resolved inside
the root as the container's namespace sees it, as the ld.so.conf.d drop-in), only when it differs;
without one ldconfig writes the root-owned /etc of an ordinary image itself, and an image whose /etc
is not writable by its owner root gets a failed ldconfig (reported).
"""
import errno
import os

from ._native import ffi, lib
from .errors import ContainerFsError
from .rootfs import Rootfs

DEFAULT_LDCONFIG = "/sbin/ldconfig"
OUTPUT_LIMIT = lib.GCT_LDCONFIG_OUTPUT_LIMIT
DEFAULT_TIMEOUT = lib.GCT_LDCONFIG_TIMEOUT_MS / 1000
LD_SO_CONF_PATH = ffi.string(lib.gct_ld_so_conf_path()).decode()   # the drop-in write_ld_so_conf writes


class Limits:
    """Resource limits for the sandboxed program (0 leaves one as it is); the defaults are the C
    header's, shared with nvidia-cdi-hook."""
    __slots__ = ("cpu_seconds", "address_space", "open_files", "file_size")

    def __init__(self, cpu_seconds=lib.GCT_LDCONFIG_CPU_SECONDS, address_space=lib.GCT_LDCONFIG_ADDRESS_SPACE,
                 open_files=lib.GCT_LDCONFIG_OPEN_FILES, file_size=lib.GCT_LDCONFIG_FILE_SIZE):
        self.cpu_seconds = cpu_seconds
        self.address_space = address_space
        self.open_files = open_files
        self.file_size = file_size


class LdconfigResult:
    """``returncode`` as subprocess reports it (negative: killed by that signal) and ``output``
    (stdout and stderr together, at most OUTPUT_LIMIT bytes, decoded with replacement)."""
    __slots__ = ("returncode", "output")

    def __init__(self, returncode: int, output: str):
        self.returncode = returncode
        self.output = output

    def __repr__(self) -> str:
        return f"LdconfigResult(returncode={self.returncode}, output={self.output!r})"


class LdconfigError(ContainerFsError):
    """ldconfig could not be started (``operation`` names the setup step), timed out, or failed
    (``operation`` is "ldconfig", ``result`` holds its exit status and output)."""

    def __init__(self, errno: int, operation: str, path=None, result: LdconfigResult = None):
        super().__init__(errno, operation, path)
        self.result = result

    def __str__(self) -> str:
        text = super().__str__()
        if self.result is not None:
            # the last line may name files of the image: what repr would escape is shown as '?'
            detail = self.result.output.strip().splitlines()
            last = "".join(c if c.isprintable() else "?" for c in detail[-1]) if detail else ""
            text += f" (exit status {self.result.returncode}{': ' + last if last else ''})"
        return text


def host_ldconfig_path(configured: str = "@" + DEFAULT_LDCONFIG) -> str:
    """The host path from the config value ``ldconfig``: "@/sbin/ldconfig" means the host's binary.

    A value without "@" names a binary inside the container; it is refused here, because this runner
    only ever runs host binaries (the caller decides whether such a config is allowed at all).
    """
    if not configured.startswith("@"):
        raise ValueError(f"ldconfig {configured!r} is a container path; only host binaries ('@/path') run")
    path = configured[1:]
    if not os.path.isabs(path):
        raise ValueError(f"ldconfig {configured!r} must be an absolute host path")
    return path


def run_ldconfig(rootfs, library_dirs=(), *, pid: int = None, ldconfig: str = DEFAULT_LDCONFIG,
                 limits: Limits = None, timeout: float = DEFAULT_TIMEOUT,
                 check: bool = True) -> LdconfigResult:
    """Run the host ``ldconfig`` (a host path) inside ``rootfs`` to rebuild its /etc/ld.so.cache.

    ``rootfs`` is the container's root as seen in its mount namespace (the path the sandbox opens
    there), or an open :class:`~libcontainer_c.rootfs.Rootfs` of it, which is used as it is. The
    cache is installed through that root: a path is opened here, in the container's view when
    ``pid`` is given (``Rootfs(rootfs, pid)``: a volume mounted over the rootfs' /etc in the
    container's namespace gets the cache, not the directory under it); an open root brings its own
    pid (a different ``pid`` given with it: ValueError). ``library_dirs`` are container paths
    scanned in addition to /etc/ld.so.conf. The C helper's gct_update_ld_cache (nvidia-cdi-hook's
    too) has ldconfig write the cache on a scratch tmpfs over the root's /proc and puts it in
    /etc/ld.so.cache only when it differs from the file there: a restarted container whose cache is
    already right keeps the file (ldconfig still saves its own /var/cache/ldconfig/aux-cache where
    the image has that directory), and one whose image entries went stale gets them refreshed. With
    ``check`` a non-zero exit raises LdconfigError; setup failures, timeouts and failures to install
    the cache always raise.
    """
    if isinstance(rootfs, Rootfs):
        if pid is not None and pid != rootfs.pid:
            raise ValueError(f"the root was opened for pid {rootfs.pid}, not {pid}")
        root, owned, pid = rootfs, None, rootfs.pid
    else:
        root = owned = None
    exe_fd = open_static_executable(ldconfig)
    ns_fd = -1
    try:
        if root is None:
            try:
                root = owned = Rootfs(rootfs, pid)
            except ContainerFsError as err:
                raise LdconfigError(err.errno, "open root", err.filename) from None
        if pid is not None:
            try:
                ns_fd = os.open(f"/proc/{int(pid)}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as err:
                raise LdconfigError(err.errno, "open mount namespace", f"/proc/{pid}/ns/mnt") from None
        argv = [b"ldconfig", *(os.fsencode(d) for d in library_dirs)]
        return _execute(exe_fd, ns_fd, root.fileno(), root.path, argv, limits or Limits(), timeout, check)
    finally:
        for fd in (exe_fd, ns_fd):
            if fd >= 0:
                os.close(fd)
        if owned is not None:
            owned.close()


def open_static_executable(path: str) -> int:
    """Open a host binary to run inside a rootfs; returns an O_RDONLY fd.

    The kernel resolves a script's interpreter and an ELF's PT_INTERP inside the chroot, so anything
    but a static executable would run code from the image as root: it is refused (ENOEXEC). A
    wrapper script (Ubuntu's /sbin/ldconfig) gives way to its static ``<path>.real`` when there is one.
    """
    check = ffi.new("struct gct_exe_check *")
    fd = lib.gct_open_static_executable(os.fsencode(path), check)
    if fd >= 0:
        return fd
    errno, failed = ffi.errno, os.fsdecode(ffi.string(check.path)) or path
    if check.problem == lib.GCT_EXE_NOT_OPENED:
        raise LdconfigError(errno, "open ldconfig", failed)
    reason = ffi.string(lib.gct_exe_problem_text(check.problem)).decode()
    raise LdconfigError(errno, f"refusing ldconfig: {reason}", failed)


def write_ld_so_conf(root, folders) -> None:
    """List ``folders`` (absolute container paths) in the root's
    /etc/ld.so.conf.d/00-nvidia-cdi-hook.conf (:data:`LD_SO_CONF_PATH`), so that an ldconfig the
    container runs later (a package install) keeps them. ``root`` is an open
    :class:`~libcontainer_c.rootfs.Rootfs`. The C helper resolves the directory inside the root and
    renames a fresh file into place: nothing the image put there is written through. Raises
    ContainerFsError."""
    keep = [ffi.new("char[]", os.fsencode(f)) for f in folders]
    c_folders = ffi.new("char *[]", keep + [ffi.NULL])
    if lib.gct_write_ld_so_conf(root.fileno(), c_folders, len(keep)) < 0:
        raise ContainerFsError(ffi.errno, "write ld.so.conf.d", LD_SO_CONF_PATH)


def cuda_compat_folder(root, host_driver_version: str, warn) -> str | None:
    """The image's CUDA forward-compat folder (/usr/local/cuda/compat) when its one
    libcuda.so.<version> is for a newer driver major than ``host_driver_version``, else None.
    ``root`` is an open :class:`~libcontainer_c.rootfs.Rootfs`; the folder is read inside it by the C
    helper (``gct_cuda_compat_major``, nvidia-cdi-hook's too). A problem reading it is a warning."""
    folder = ffi.string(lib.gct_cuda_compat_dir()).decode()
    major = lib.gct_cuda_compat_major(root.fileno())
    if major < 0:
        err = ffi.errno
        reason = "more than one libcuda.so.<version>" if err == errno.ENOTUNIQ else os.strerror(err)
        warn(f"not using the CUDA compat libraries in {folder}: {reason}")
        return None
    return folder if major > _major_of(host_driver_version) else None


def _major_of(version: str) -> int:
    """The leading ASCII digits of a driver version ("550.54.15": 550; none: 0), as nvidia-cdi-hook's
    strtol reads them: both hooks decide the same for any value (str.isdigit() also takes "²" and
    "٥", on which int() raised ValueError or read another number)."""
    end = 0
    while end < len(version) and "0" <= version[end] <= "9":
        end += 1
    return int(version[:end] or "0")


def _execute(exe_fd, ns_fd, root_fd, rootfs, argv, limits, timeout, check) -> LdconfigResult:
    keep = [ffi.new("char[]", a) for a in argv]
    c_argv = ffi.new("char *[]", keep + [ffi.NULL])
    root = ffi.new("char[]", os.fsencode(rootfs))
    sb = ffi.new("struct gct_sandbox *")
    sb.exe_fd, sb.mntns_fd, sb.root_path, sb.argv = exe_fd, ns_fd, root, c_argv
    sb.limits.cpu_seconds = limits.cpu_seconds
    sb.limits.address_space = limits.address_space
    sb.limits.open_files = limits.open_files
    sb.limits.file_size = limits.file_size
    sb.timeout_ms = int(timeout * 1000)
    output = ffi.new("char[]", OUTPUT_LIMIT)
    res = ffi.new("struct gct_sandbox_result *")

    rc = lib.gct_update_ld_cache(root_fd, sb, output, OUTPUT_LIMIT, res)
    text = ffi.unpack(output, res.output_len).decode(errors="replace")
    result = LdconfigResult(_returncode(res.status), text)
    if rc < 0:
        if res.timed_out:
            raise LdconfigError(ffi.errno, f"ldconfig timed out after {timeout:g}s", rootfs, result)
        stage = ffi.string(res.stage).decode() or "start ldconfig"
        # a setup step names the root; reading or writing the cache names that file
        raise LdconfigError(ffi.errno, stage, ffi.string(res.path).decode() if res.path else rootfs)
    if check and result.returncode != 0:
        raise LdconfigError(5, "ldconfig", rootfs, result)  # EIO: it ran and failed
    return result


def _returncode(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)
