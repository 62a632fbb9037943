"""The one sandboxed ldconfig runner: updates a container's /etc/ld.so.cache with the HOST's ldconfig.

The binary is opened here, in the caller's namespace, before anything is entered, so an image can
never substitute its own. A forked child (C, no Python) then joins the container's mount namespace
(``pid``; None = stay in this one, as a createContainer hook already is in the container's), takes a
private copy of it, hides a procfs mounted in the rootfs, chroots into the rootfs, sets resource
limits, drops every capability (bounding set included, securebits locked so uid 0 regains nothing on
exec), sets no_new_privs and executes the binary from its fd with an empty environment.

Capabilities: none are kept. ldconfig runs as uid 0 inside the rootfs, so it can write the root-owned
/etc of an ordinary image without CAP_DAC_OVERRIDE; an image whose /etc is not writable by its owner
root gets a failed ldconfig (reported), never a privileged one.
"""
import os
import stat

from ._native import ffi, lib
from .errors import ContainerFsError

DEFAULT_LDCONFIG = "/sbin/ldconfig"
OUTPUT_LIMIT = 64 * 1024


class Limits:
    """Resource limits for the sandboxed program (0 leaves one as it is)."""
    __slots__ = ("cpu_seconds", "address_space", "open_files", "file_size")

    def __init__(self, cpu_seconds=10, address_space=1 << 30, open_files=256, file_size=64 << 20):
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
            detail = self.result.output.strip().splitlines()
            text += f" (exit status {self.result.returncode}{': ' + detail[-1] if detail else ''})"
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
                 extra_args=(), limits: Limits = None, timeout: float = 10.0,
                 check: bool = True) -> LdconfigResult:
    """Run the host ``ldconfig`` (a host path) inside ``rootfs`` to rebuild its /etc/ld.so.cache.

    ``rootfs`` is the container's root as seen in its mount namespace; ``library_dirs`` are container
    paths scanned in addition to /etc/ld.so.conf. With ``check`` a non-zero exit raises LdconfigError;
    setup failures and timeouts always raise.
    """
    exe_fd = open_static_executable(ldconfig)
    ns_fd = -1
    try:
        if pid is not None:
            try:
                ns_fd = os.open(f"/proc/{int(pid)}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as err:
                raise LdconfigError(err.errno, "open mount namespace", f"/proc/{pid}/ns/mnt") from None
        argv = [b"ldconfig", *(os.fsencode(a) for a in extra_args), *(os.fsencode(d) for d in library_dirs)]
        return _execute(exe_fd, ns_fd, rootfs, argv, limits or Limits(), timeout, check)
    finally:
        os.close(exe_fd)
        if ns_fd >= 0:
            os.close(ns_fd)


_NOT_STATIC = {
    "script": "it is a script, whose interpreter would be loaded from the container's rootfs",
    "dynamic": "it is dynamically linked, so the container's ld.so would load it",
    "not elf": "it is not an ELF executable",
}


def open_static_executable(path: str) -> int:
    """Open a host binary to run inside a rootfs; returns an O_RDONLY fd.

    The kernel resolves a script's interpreter and an ELF's PT_INTERP inside the chroot, so anything
    but a static executable would run code from the image as root: it is refused (ENOEXEC). A
    wrapper script (Ubuntu's /sbin/ldconfig) gives way to its static ``<path>.real`` when there is one.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise LdconfigError(err.errno, "open ldconfig", path) from None
    try:
        problem = "not elf" if not stat.S_ISREG(os.fstat(fd).st_mode) else _why_not_static(fd)
    except BaseException:
        os.close(fd)
        raise
    if problem is None:
        return fd
    os.close(fd)
    if problem == "script" and os.path.exists(path + ".real"):
        return open_static_executable(path + ".real")
    raise LdconfigError(8, f"refusing ldconfig: {_NOT_STATIC[problem]}", path)


def _why_not_static(fd: int):
    """None for a static ELF executable, else "script", "dynamic" or "not elf"."""
    import struct  # a C module: cheap, and only needed here

    head = os.pread(fd, 64, 0)
    if head[:2] == b"#!":
        return "script"
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return "not elf"
    order = "<" if head[5] == 1 else ">"
    if head[4] == 2:
        phoff, = struct.unpack_from(order + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
    else:
        phoff, = struct.unpack_from(order + "I", head, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 42)
    if phentsize < 4 or phnum == 0:
        return "not elf"
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        return "not elf"
    for i in range(phnum):
        if struct.unpack_from(order + "I", table, i * phentsize)[0] == 3:  # PT_INTERP
            return "dynamic"
    return None


def _execute(exe_fd, ns_fd, rootfs, argv, limits, timeout, check) -> LdconfigResult:
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

    rc = lib.gct_sandbox_exec(sb, output, OUTPUT_LIMIT, res)
    text = ffi.unpack(output, res.output_len).decode(errors="replace")
    result = LdconfigResult(_returncode(res.status), text)
    if rc < 0:
        if res.timed_out:
            raise LdconfigError(ffi.errno, f"ldconfig timed out after {timeout:g}s", rootfs, result)
        stage = ffi.string(res.stage).decode() or "start ldconfig"
        raise LdconfigError(ffi.errno, stage, rootfs)
    if check and result.returncode != 0:
        raise LdconfigError(5, "ldconfig", rootfs, result)  # EIO: it ran and failed
    return result


def _returncode(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)
