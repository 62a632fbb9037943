"""Which files of the NVIDIA driver a container needs, by capability, found inside a driver root.

    files = locate_driver_files("/", "550.54.15", {"utility", "compute"})
    for f in files.libraries: ... f.host_path, f.container_path, f.soname, f.symlinks

Libraries come from the root's own etc/ld.so.cache (its paths are as seen from the root), read in
one pass for every capability, or from a scan of the standard library directories when the root
has no cache. A library counts only if its resolved file name ends in the driver version (so
`libcuda.so.1` from some other package is never taken) and it is an ELF shared object of the
right class. Binaries, firmware, IPC sockets and the MPS pipe directory are looked up at their
well-known places. Every path is resolved inside the root (cdi.driver_root): a link in the root
can never lead to a file outside it. Optional files that are missing are logged at debug level.

Container paths: a library is mounted at its canonical path in the root and reached through the
SONAME link; binaries, firmware, sockets and the MPS directory at the path their users look them
up by (`/usr/bin/nvidia-smi`, `/var/run/nvidia-persistenced/socket`), even when the host file is
reached through a link.
"""
from __future__ import annotations

import os
import posixpath
import stat

from cdi.driver_root import DriverRoot, DriverRootError, SymlinkLoopError
from cdi.elf import EM_386, EM_AARCH64, EM_X86_64, ElfError, read_elf_library
from cdi.errors import CdiError
from cdi.log import get_logger
from cdi.record import Record

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (or collections, for one name)
if TYPE_CHECKING:
    from collections.abc import Iterable

log = get_logger(__name__)  # imports logging only when a message can be shown

# Library names (the part of the soname before ".so") per capability.
LIBRARIES = {
    "utility": ("libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"),
    "compute": ("libcuda", "libcudadebugger", "libnvidia-opencl", "libnvidia-gpucomp",
                "libnvidia-ptxjitcompiler", "libnvidia-fatbinaryloader", "libnvidia-allocator",
                "libnvidia-compiler", "libnvidia-pkcs11", "libnvidia-pkcs11-openssl3",
                "libnvidia-nvvm"),
    "video": ("libvdpau_nvidia", "libnvidia-encode", "libnvidia-opticalflow", "libnvcuvid"),
    "graphics": ("libnvidia-eglcore", "libnvidia-glcore", "libnvidia-tls", "libnvidia-glsi",
                 "libnvidia-fbc", "libnvidia-ifr", "libnvidia-rtcore", "libnvoptix",
                 "libGLX_nvidia", "libEGL_nvidia", "libGLESv2_nvidia", "libGLESv1_CM_nvidia",
                 "libnvidia-glvkspirv", "libnvidia-cbl"),
    "ngx": ("libnvidia-ngx",),
}
BINARIES = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}
IPC_SOCKETS = {
    "utility": ("/var/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket",
                "/var/run/nvidia-fabricmanager/socket", "/run/nvidia-fabricmanager/socket"),
}
DEFAULT_MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
MPS_PIPE_DIRECTORY_ENV = "CUDA_MPS_PIPE_DIRECTORY"
FIRMWARE_DIRECTORY = "/lib/firmware/nvidia/{version}"
FIRMWARE_PREFIX, FIRMWARE_SUFFIX = "gsp", ".bin"   # gsp*.bin: no fnmatch (it imports re)
FIRMWARE_PATTERN = f"{FIRMWARE_PREFIX}*{FIRMWARE_SUFFIX}"
LD_CACHE = "/etc/ld.so.cache"
# The PATH the real tools fall back to; binaries are searched in it, inside the root.
DEFAULT_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Links beside a library that its users look it up by, as NVIDIA's tool makes them:
# soname -> ((link path relative to the library's folder, target), ...); a target of None is the
# library's own file name. libcuda.so, libnvidia-ml.so and libnvidia-opticalflow.so are dlopen()ed by
# name (no -dev package in the image); GLVND loads libGLX_indirect.so.0 for indirect GLX; Mesa's GBM
# loads its NVIDIA backend as gbm/nvidia-drm_gbm.so (graphics only, see GRAPHICS_ONLY_LINKS).
EXTRA_LINKS = {
    "libcuda.so.1": (("libcuda.so", "libcuda.so.1"),),
    "libnvidia-ml.so.1": (("libnvidia-ml.so", "libnvidia-ml.so.1"),),
    "libnvidia-opticalflow.so.1": (("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),),
    "libGLX_nvidia.so.0": (("libGLX_indirect.so.0", None),),
    "libnvidia-allocator.so.1": (("gbm/nvidia-drm_gbm.so", "../libnvidia-allocator.so.1"),),
}
GRAPHICS_ONLY_LINKS = frozenset({"gbm/nvidia-drm_gbm.so"})

ALL_CAPABILITIES = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")
# Libraries a capability needs beyond its own (docs/reference.md#driver-libraries).
_IMPLIED_LIBRARIES = {"video": ("compute",), "display": ("graphics",)}
COMMON = "common"   # the capability of files every request gets (GSP firmware)

LIBRARY, LIBRARY32, BINARY, FIRMWARE = "library", "library32", "binary", "firmware"
IPC_SOCKET, MPS_DIR = "ipc-socket", "mps-dir"

_CAPABILITY_OF_LIBRARY = {name: cap for cap, names in LIBRARIES.items() for name in names}
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _valid_version(text: object) -> bool:
    """[0-9A-Za-z][0-9A-Za-z._-]{0,63}, as a string test: no re on a container's start path."""
    return isinstance(text, str) and 0 < len(text) <= 64 and text[0] in _ALNUM and not text.strip(_ALNUM + "._-")


class _Abi(Record, frozen=True):
    cache_arch: int           # ld.so.cache flags & 0xff00
    elf_machine: int
    is_64bit: bool
    scan_dirs: tuple[str, ...]  # where to look when the root has no ld.so.cache


# Per machine: the native ABI and the 32-bit one that compat32 asks for (None: there is none).
_ABIS = {
    "x86_64": (_Abi(0x0300, EM_X86_64, True, ("/usr/lib/x86_64-linux-gnu", "/usr/lib64",
                                              "/lib64", "/usr/lib")),
               _Abi(0x0000, EM_386, False, ("/usr/lib/i386-linux-gnu", "/usr/lib32",
                                            "/lib32", "/usr/lib"))),
    "aarch64": (_Abi(0x0a00, EM_AARCH64, True, ("/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                                                "/lib64", "/usr/lib")), None),
}


class DriverFilesError(CdiError):
    """Discovery cannot run: bad root, version or capability, or an unreadable ld.so.cache."""


class Symlink(Record, frozen=True):
    path: str      # absolute path of the link in the container
    target: str    # what it points to, relative to the link's folder (a file name, or ../name)


class DriverFile(Record, frozen=True):
    kind: str            # LIBRARY, LIBRARY32, BINARY, FIRMWARE, IPC_SOCKET or MPS_DIR
    capability: str      # the capability that brings it (COMMON for firmware)
    host_path: str       # absolute on the host: driver root + canonical path in the root
    container_path: str  # path as seen from the root: where it goes in the container
    soname: str | None = None
    symlinks: tuple[Symlink, ...] = ()   # links a library needs next to it in the container


class DriverFiles(Record, frozen=True):
    root: str
    driver_version: str
    files: tuple[DriverFile, ...]

    def of_kind(self, *kinds: str) -> tuple[DriverFile, ...]:
        return tuple(f for f in self.files if f.kind in kinds)

    @property
    def libraries(self) -> tuple[DriverFile, ...]:
        return self.of_kind(LIBRARY, LIBRARY32)

    @property
    def symlinks(self) -> tuple[Symlink, ...]:
        return tuple(link for f in self.files for link in f.symlinks)


def locate_driver_files(root: str | DriverRoot, driver_version: str, capabilities: Iterable[str], *,
                        search_path: str | None = None,
                        mps_pipe_directory: str | None = None,
                        ld_cache: str = LD_CACHE,
                        machine: str | None = None) -> DriverFiles:
    """Find the driver files for `capabilities` inside the driver root `root` ("/" on a host, or a
    DriverRoot: cdi.driver_files_cache passes one that notes what it is asked).

    `driver_version` comes from NVML. `search_path` is a PATH-style list of binary directories
    (inside the root; default DEFAULT_SEARCH_PATH). `mps_pipe_directory` defaults to
    $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps. `ld_cache` is the cache's path inside the
    root (config `[nvidia-container-cli] ldcache`). `machine` (default: this host's) picks the
    library ABI. Raises DriverFilesError; missing files are not an error."""
    if not _valid_version(driver_version):
        raise DriverFilesError(f"invalid driver version {driver_version!r}")
    caps = parse_capabilities(capabilities)
    machine = machine or os.uname().machine
    if machine not in _ABIS:
        raise DriverFilesError(f"unsupported machine {machine!r} (known: {', '.join(_ABIS)})")
    if mps_pipe_directory is None:
        mps_pipe_directory = mps_pipe_directory_of()
    try:
        root = root if isinstance(root, DriverRoot) else DriverRoot(root)
        search = _Search(root, driver_version, _ABIS[machine], ld_cache or LD_CACHE)
        files = (search.libraries(caps) + search.binaries(caps, search_path or DEFAULT_SEARCH_PATH)
                 + search.firmware() + search.ipc_sockets(caps)
                 + search.mps_directory(caps, mps_pipe_directory))
    except DriverRootError as e:
        raise DriverFilesError(e.what, e.where) from None
    return DriverFiles(root=search.root.path, driver_version=driver_version, files=tuple(files))


def mps_pipe_directory_of(environ: dict | None = None) -> str:
    """The MPS pipe directory every program mounts for `compute`: $CUDA_MPS_PIPE_DIRECTORY of the
    program's own environment (the engine's or the admin's, as the MPS daemon's users read it), else
    /tmp/nvidia-mps. The launchers pass the variable on to every program, and the runtime shim hands
    it to the prestart hook it adds (runtime_shim.runtime_cache.CONFIG_ENV_KEYS)."""
    environ = os.environ if environ is None else environ
    return environ.get(MPS_PIPE_DIRECTORY_ENV) or DEFAULT_MPS_PIPE_DIRECTORY


def parse_capabilities(capabilities: Iterable[str]) -> frozenset[str]:
    """The set of capability names, `all` expanded; an unknown name is an error."""
    if isinstance(capabilities, str):
        capabilities = capabilities.split(",")
    caps = set()
    for raw in capabilities:
        name = raw.strip()
        if not name:
            continue
        if name == "all":
            caps.update(ALL_CAPABILITIES)
        elif name in ALL_CAPABILITIES:
            caps.add(name)
        else:
            raise DriverFilesError(f"unknown driver capability {name!r} "
                                   f"(known: all, {', '.join(ALL_CAPABILITIES)})")
    return frozenset(caps)


def library_name(filename: str) -> str | None:
    """"libcuda" for "libcuda.so", "libcuda.so.1" or "libcuda.so.550.54.15"; else None."""
    stem, dot_so, rest = filename.partition(".so")
    if not dot_so or (rest and not rest.startswith(".")):
        return None
    return stem


class _Search:
    def __init__(self, root: DriverRoot, version: str, abis: tuple[_Abi, _Abi | None],
                 ld_cache: str):
        self.root = root
        self.version = version
        self.native, self.compat32 = abis
        self.ld_cache = ld_cache
        self.graphics = False   # whether graphics links (GRAPHICS_ONLY_LINKS) are made

    # -- libraries ---------------------------------------------------------------------------

    def libraries(self, caps: frozenset[str]) -> list[DriverFile]:
        wanted = {c for c in caps if c in LIBRARIES}
        for cap in caps:
            wanted.update(_IMPLIED_LIBRARIES.get(cap, ()))
        abis = [(LIBRARY, self.native)]
        if "compat32" in caps and self.compat32 is not None:
            abis.append((LIBRARY32, self.compat32))
        if not wanted:
            return []
        self.graphics = bool(caps & {"graphics", "display"})
        found: dict[tuple[str, str], DriverFile] = {}
        names = set()   # (kind, library name) found: a library search path only fills in the others
        for kind, abi, cap, path, key, extra in self._library_candidates(wanted, abis):
            name = (kind, library_name(posixpath.basename(path)))
            if extra and name in names:
                continue
            library = self._library(kind, abi, cap, path, key)
            if library is not None:
                found.setdefault((kind, library.container_path), library)
                names.add(name)
        for kind, _ in abis:
            for cap in sorted(wanted):
                if not any(f.kind == kind and f.capability == cap for f in found.values()):
                    log.debug("no %s libraries for capability %s, driver %s, in %s",
                              kind, cap, self.version, self.root.path)
        return sorted(found.values(), key=lambda f: (f.kind, f.container_path))

    def _library_candidates(self, wanted, abis):
        """(kind, abi, capability, path in root, cache key, from a library search path) for every
        possible library."""
        entries = self._ld_cache()
        if entries is not None:
            for entry in entries:   # one pass for all capabilities and both ABIs
                cap = _CAPABILITY_OF_LIBRARY.get(library_name(entry.soname) or "")
                if cap not in wanted or not entry.is_elf:
                    continue
                for kind, abi in abis:
                    if entry.arch_flag == abi.cache_arch:
                        yield kind, abi, cap, entry.path, entry.soname, False
        extra = self.root.library_search_paths
        for kind, abi in abis:
            # the usual folders only without a cache; the root's library_search_paths always, last
            # (libraries() takes from them only what was not found before them)
            usual = abi.scan_dirs if entries is None else ()
            for directory, is_extra in (*((d, False) for d in usual), *((d, True) for d in extra)):
                resolved = self._resolve(directory)
                if resolved is None:
                    continue
                for name in self.root.listdir(resolved):
                    cap = _CAPABILITY_OF_LIBRARY.get(library_name(name) or "")
                    if cap in wanted and name.endswith("." + self.version):
                        yield kind, abi, cap, posixpath.join(resolved, name), None, is_extra

    def _ld_cache(self):
        # only when the driver's files are searched (not on a cdi.driver_files_cache hit): ~0.2-0.7 ms
        from cdi.ldcache import MAX_CACHE_SIZE, LdCacheError, parse_ld_cache

        path = self._resolve(self.ld_cache)
        if path is None:
            log.debug("no %s in %s: scanning library directories", self.ld_cache, self.root.path)
            return None
        st = self.root.stat(path)
        if st is None or not stat.S_ISREG(st.st_mode):
            raise DriverFilesError("ld.so.cache is not a regular file", self.root.host_path(path))
        fd = self.root.open_file(path)
        try:
            data = _read_all(fd, MAX_CACHE_SIZE + 1)
        except OSError as e:
            raise DriverFilesError(f"cannot read: {e.strerror or e}",
                                   self.root.host_path(path)) from None
        finally:
            os.close(fd)
        try:
            return parse_ld_cache(data, self.root.host_path(path))
        except LdCacheError as e:
            raise DriverFilesError(e.what, e.where) from None

    def _library(self, kind, abi, cap, path, key) -> DriverFile | None:
        resolved = self._resolve(path)
        if resolved is None:
            log.debug("library %s (%s) does not exist in %s", path, key, self.root.path)
            return None
        name = posixpath.basename(resolved)
        if not name.endswith("." + self.version):
            log.debug("skipping %s: %s is not of driver version %s", path, name, self.version)
            return None
        st = self.root.stat(resolved)
        if st is None or not stat.S_ISREG(st.st_mode):
            log.debug("skipping %s: not a regular file", resolved)
            return None
        host_path = self.root.host_path(resolved)
        fd = self.root.open_file(resolved)
        try:
            elf = read_elf_library(host_path, fd)
        except ElfError as e:
            log.debug("skipping %s: %s", host_path, e)
            return None
        finally:
            os.close(fd)
        if elf.is_64bit != abi.is_64bit or elf.machine != abi.elf_machine:
            log.debug("skipping %s: not a %s library", host_path, kind)
            return None
        soname = elf.soname or key
        if soname is not None and not _is_plain_name(soname):
            log.warning("ignoring soname %r of %s: not a plain file name", soname, host_path)
            soname = None
        return DriverFile(kind, cap, host_path, resolved, soname,
                          _library_symlinks(resolved, soname, graphics=self.graphics))

    # -- everything else ---------------------------------------------------------------------

    def binaries(self, caps: frozenset[str], search_path: str) -> list[DriverFile]:
        dirs = [posixpath.normpath(d) for d in search_path.split(":") if d.startswith("/")]
        found = []
        for cap in sorted(caps & BINARIES.keys()):
            for name in BINARIES[cap]:
                binary = self._binary(cap, name, dict.fromkeys(dirs))
                if binary is None:
                    log.debug("binary %s not found in %s (searched %s)",
                              name, self.root.path, ":".join(dirs))
                else:
                    found.append(binary)
        return found

    def _binary(self, cap, name, dirs) -> DriverFile | None:
        for directory in dirs:
            lookup = posixpath.join(directory, name)
            resolved = self._resolve(lookup)
            st = self.root.stat(resolved) if resolved else None
            if st is not None and stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                return DriverFile(BINARY, cap, self.root.host_path(resolved), lookup)
        return None

    def firmware(self) -> list[DriverFile]:
        directory = FIRMWARE_DIRECTORY.format(version=self.version)
        resolved_dir = self._resolve(directory)
        if resolved_dir is None:
            log.debug("no firmware directory %s in %s", directory, self.root.path)
            return []
        found = []
        for name in self.root.listdir(resolved_dir):
            if not (name.startswith(FIRMWARE_PREFIX) and name.endswith(FIRMWARE_SUFFIX)):
                continue
            resolved = self._resolve(posixpath.join(resolved_dir, name))
            st = self.root.stat(resolved) if resolved else None
            if st is not None and stat.S_ISREG(st.st_mode):
                found.append(DriverFile(FIRMWARE, COMMON, self.root.host_path(resolved),
                                        posixpath.join(directory, name)))
        if not found:
            log.debug("no %s in %s%s", FIRMWARE_PATTERN, self.root.path, directory)
        return found

    def ipc_sockets(self, caps: frozenset[str]) -> list[DriverFile]:
        found: dict[str, DriverFile] = {}
        for cap in sorted(caps & IPC_SOCKETS.keys()):
            for lookup in IPC_SOCKETS[cap]:
                resolved = self._resolve(lookup)
                st = self.root.stat(resolved) if resolved else None
                if st is None or not stat.S_ISSOCK(st.st_mode):
                    log.debug("no IPC socket %s in %s", lookup, self.root.path)
                    continue
                host_path = self.root.host_path(resolved)
                # /var/run usually links to /run: the first spelling found is the one kept.
                found.setdefault(host_path, DriverFile(IPC_SOCKET, cap, host_path, lookup))
        return list(found.values())

    def mps_directory(self, caps: frozenset[str], directory: str) -> list[DriverFile]:
        if "compute" not in caps:
            return []
        if not directory.startswith("/"):
            log.debug("ignoring MPS pipe directory %r: not an absolute path", directory)
            return []
        lookup = posixpath.normpath(directory)
        resolved = self._resolve(lookup)
        st = self.root.stat(resolved) if resolved else None
        if st is None or not stat.S_ISDIR(st.st_mode):
            log.debug("no MPS pipe directory %s in %s", lookup, self.root.path)
            return []
        return [DriverFile(MPS_DIR, "compute", self.root.host_path(resolved), lookup)]

    def _resolve(self, path: str) -> str | None:
        """resolve() inside the root; a symlink loop is logged and treated as missing."""
        try:
            return self.root.resolve(path)
        except SymlinkLoopError as e:
            log.warning("%s", e)
            return None


def _read_all(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _is_plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _library_symlinks(container_path: str, soname: str | None, *, graphics: bool = False) -> tuple[Symlink, ...]:
    """SONAME -> file, then the EXTRA_LINKS of that soname (graphics ones only with `graphics`)."""
    directory, name = posixpath.split(container_path)
    if soname is None:
        return ()
    links = []
    if soname != name:
        links.append(Symlink(posixpath.join(directory, soname), name))
    for link, target in EXTRA_LINKS.get(soname, ()):
        if graphics or link not in GRAPHICS_ONLY_LINKS:
            links.append(Symlink(posixpath.join(directory, link), target or name))
    return tuple(links)
