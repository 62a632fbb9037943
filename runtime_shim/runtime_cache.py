"""The passthrough cache: what the C launcher needs to exec the low-level runtime without Python.

config.toml is read only here, in Python (one TOML parser). After resolving the low-level runtime, the
shim writes it to `<cache dir>/runtime-<fnv1a64(config path)>.cache`, a small text file:

    gct-runtime-cache 2
    config <config path as the launcher computes it>
    identity <dev> <ino> <size> <mtime_ns> <ctime_ns>     (or: identity missing)
    search-path <the PATH the runtime was looked up in>
    search-dir <mtime ns, or -1 if missing> <dir>             (one line per PATH directory)
    runtime <absolute path of the low-level runtime>
    debug-log <path>                                         (only when the config sets a debug log)
    request-marker <string>                                  (one line each, see request_markers)
    key-environ / key-env-prefix / key-env-name / key-annotation-prefix / key-mount-prefix <string>
                                     which variables and config.json members make a request's key (key_rules)
    end <length of the lines above> <their seal_checksum>     the file is whole and unchanged (seal)

The launcher (launcher/runtime_passthrough.c) uses it only when every key still matches its own
view (config path, the file's identity now, the caller's PATH) and the file is a regular file owned by
its euid that no one else can write; otherwise it starts Python, which writes a fresh one. On create
and run it also reads the bundle's config.json and execs the runtime at once when none of the request
markers occurs in it (no GPU request is possible then, and such a config.json is left untouched).
The PATH directories' mtimes catch a runtime installed since in a directory searched first; a PATH
with a relative directory depends on the caller's cwd, so it gets no cache at all. ctime is in
the identity because no one can set it back: an edit in place that restores size and mtime still
changes it. The cache dir is `$NVIDIA_CTK_CACHE_DIR`, else /run/nvidia-container-toolkit (tmpfs: the
cache does not outlive a boot); a relative `$NVIDIA_CTK_CACHE_DIR` means no cache (see cache_dir).
"""
from __future__ import annotations

import os
import stat
import struct

from runtime_shim.shim_log import log


MAGIC = "gct-runtime-cache 2"   # 2: sealed (the end line)
MAX_CACHE_BYTES = 16384  # the launcher's read buffer
CACHE_DIR_ENV = "NVIDIA_CTK_CACHE_DIR"
DEFAULT_CACHE_DIR = "/run/nvidia-container-toolkit"
DEFAULT_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONFIG_ENV = "NVIDIA_CTK_CONFIG_FILE_PATH"
MPS_PIPE_DIRECTORY_ENV = "CUDA_MPS_PIPE_DIRECTORY"   # cdi.driver_files', not imported on this path
DEFAULT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
CONFIG_RELATIVE = "/nvidia-container-runtime/config.toml"


def fnv1a64(text: str) -> int:
    value = 0xCBF29CE484222325
    for byte in os.fsencode(text):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def seal_checksum(body: bytes) -> int:
    """FNV-1a's steps on 64-bit little-endian words, the last one zero-padded (runtime_passthrough.c's
    seal_checksum: a changed word always changes it; one multiply per 8 bytes keeps the launcher's
    check of a 20 KB entry cheap)."""
    value = 0xCBF29CE484222325
    for (word,) in struct.iter_unpack("<Q", body + b"\0" * (-len(body) % 8)):
        value = ((value ^ word) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def seal(body: bytes) -> bytes:
    """A cache file's bytes: its lines (body, each with its newline), then the line that proves them whole
    and unchanged, `end <length of body> <seal_checksum of body, 16 hex digits>`. The launcher
    (read_cache in runtime_passthrough.c) and unsealed use a file only with that line, and both numbers
    right: one cut short anywhere, or with a byte changed, is not read at all (a missing line must not
    be taken for a line that was never written: a dropped request-marker, a dropped edit)."""
    return body + f"end {len(body)} {seal_checksum(body):016x}\n".encode()


def unsealed(data: bytes) -> bytes | None:
    """The body of a sealed cache file (seal), None when its end line is missing or wrong."""
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    if start == 0 or b"\0" in data[:start]:
        return None
    return data[:start] if data[start:] == seal(data[:start])[start:] else None


def config_path_string(environ: dict[str, str]) -> str:
    """cdi.config.config_path's rule, as the unnormalised string the launcher also builds."""
    if environ.get(CONFIG_ENV):
        return environ[CONFIG_ENV]
    if environ.get("XDG_CONFIG_HOME"):
        return environ["XDG_CONFIG_HOME"] + CONFIG_RELATIVE
    return DEFAULT_CONFIG


def search_path(environ: dict[str, str]) -> str:
    """The PATH runtimes are looked up in: the caller's, or the launcher's default when unset/empty."""
    return environ.get("PATH") or DEFAULT_SEARCH_PATH


def cache_dir(environ: dict[str, str]) -> str | None:
    """`$NVIDIA_CTK_CACHE_DIR`, else the default; None (no cache at all) for a relative value: it would
    name a directory under the caller's cwd, which for a create under containerd is the bundle, and
    a cache there is written into every container's bundle and never found again (cdi.config_cache
    ignores a relative one too)."""
    value = environ.get(CACHE_DIR_ENV)
    if not value:
        return DEFAULT_CACHE_DIR
    return value if value.startswith("/") else None


def cache_file(environ: dict[str, str]) -> str | None:
    directory = cache_dir(environ)
    if directory is None:
        return None
    return os.path.join(directory, f"runtime-{fnv1a64(config_path_string(environ)):016x}.cache")


def config_identity(path: str) -> str | None:
    """The launcher's identity string for the config file; None when it cannot be looked at."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return None
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def request_markers(config) -> list[str]:
    """Strings one of which occurs in every config.json that asks for a GPU, by cdi.request's rules:
    the device variables (NVIDIA_VISIBLE_DEVICES and the swarm resource names), CUDA_VERSION (a legacy
    CUDA image asks for all GPUs), the CDI annotation prefixes, and the device-list mount root when
    the config accepts mounts. [] (no fast path) when one of them is empty."""
    from cdi.request import DEVICE_LIST_MOUNT_ROOT, VISIBLE_DEVICES, swarm_names

    markers = [VISIBLE_DEVICES, *swarm_names(config), "CUDA_VERSION", *config.cdi.annotation_prefixes]
    if config.accept_volume_mounts:
        markers.append(DEVICE_LIST_MOUNT_ROOT)
    if any(not m or "\n" in m or "\0" in m for m in markers):
        return []
    return list(dict.fromkeys(markers))


# The caller's variables that pick the config, the caches, the driver root and the MPS pipe directory
# (a create cache key holds them: an entry made under another MPS directory is not applied)
CONFIG_ENV_KEYS = (CONFIG_ENV, "XDG_CONFIG_HOME", CACHE_DIR_ENV, "NVIDIA_CTK_DRIVER_ROOT", MPS_PIPE_DIRECTORY_ENV)
NVML_TIMEOUT_ENV = "NVIDIA_CTK_NVML_TIMEOUT"   # cdi.nvml's (not imported on this path; a test holds them equal)
# What the legacy hook entry copies from the caller (runtime_shim.modes), so that the hook reads the
# config, caches, driver root and MPS directory this shim read, and waits for NVML as long as it would
HOOK_ENV_KEYS = (*CONFIG_ENV_KEYS, NVML_TIMEOUT_ENV)
# What a create cache key holds (runtime_shim.create_cache): the caller's variables above, the spec
# cache's file and NVML's timeout (jit-cdi, and the legacy hook's env), in this order; and the
# config.json env entries cdi.request reads: every NVIDIA_ one, CUDA_VERSION and the swarm resource names.
KEY_ENVIRON = (*CONFIG_ENV_KEYS, "NVIDIA_CTK_CDI_CACHE_FILE", NVML_TIMEOUT_ENV)
KEY_ENV_PREFIX = "NVIDIA_"
KEY_ENV_NAMES = ("CUDA_VERSION",)


def key_env_names(config) -> tuple[str, ...]:
    from cdi.request import swarm_names

    return (*KEY_ENV_NAMES, *swarm_names(config))


def key_rules(config) -> list[tuple[str, str]]:
    """This cache's lines that tell the launcher which variables and config.json members make a create
    cache key (create_fastpath.c's request_key; create_cache.key_lines writes the same key)."""
    from cdi.request import DEVICE_LIST_MOUNT_ROOT

    rules = [("key-environ", name) for name in KEY_ENVIRON]
    rules += [("key-env-prefix", KEY_ENV_PREFIX)] + [("key-env-name", n) for n in key_env_names(config)]
    rules += [("key-annotation-prefix", p) for p in config.cdi.annotation_prefixes]
    return rules + [("key-mount-prefix", DEVICE_LIST_MOUNT_ROOT)]


def search_dirs(path: str) -> list[tuple[str, str]] | None:
    """(mtime ns or "-1", dir) for each PATH directory; None when one is relative or unreadable."""
    dirs = []
    for directory in dict.fromkeys(path.split(os.pathsep)):
        if not directory.startswith("/"):
            return None
        try:
            dirs.append((str(os.stat(directory).st_mtime_ns), directory))
        except FileNotFoundError:
            dirs.append(("-1", directory))
        except OSError:
            return None
    return dirs


def render(config: str, identity: str, path: str, runtime: str, debug_log: str | None,
           markers: list[str] = (), rules: list[tuple[str, str]] = ()) -> str | None:
    """The cache text, or None when it cannot be written (a value not on one line, a relative PATH dir)."""
    dirs = search_dirs(path)
    if dirs is None:
        return None
    fields = [("config", config), ("identity", identity), ("search-path", path), ("runtime", runtime)]
    fields += [("search-dir", f"{mtime} {directory}") for mtime, directory in dirs]
    if debug_log:
        fields.append(("debug-log", debug_log))
    fields += [("request-marker", m) for m in markers]
    fields += list(rules)
    if any("\n" in value or "\0" in value or not value for _, value in fields):
        return None
    return "\n".join([MAGIC, *(f"{key} {value}" for key, value in fields)]) + "\n"


def read_trusted_bytes(path: str, limit: int = MAX_CACHE_BYTES) -> bytes | None:
    """The bytes of a cache file the launcher would trust (a regular file, not a symlink, owned by our
    euid, writable by no one else, under limit bytes); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or st.st_size >= limit):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_cache_text(path: str, magic: str = MAGIC, limit: int = MAX_CACHE_BYTES) -> str | None:
    """The lines of a cache file the launcher would use (read_trusted_bytes, whole and unchanged as
    sealed, starting with the magic line), without the end line; None otherwise."""
    body = unsealed(read_trusted_bytes(path, limit) or b"")
    try:
        text = body.decode("utf-8") if body is not None else None
    except UnicodeDecodeError:
        return None
    return text if text is not None and text.startswith(magic + "\n") else None


def read_cache(path: str, magic: str = MAGIC, limit: int = MAX_CACHE_BYTES) -> dict[str, list[str]]:
    """The fields of a trusted cache file, each key with its values in order; {} if there is none."""
    fields: dict[str, list[str]] = {}
    for line in (read_cache_text(path, magic, limit) or "").splitlines()[1:]:
        key, _, value = line.partition(" ")
        fields.setdefault(key, []).append(value)
    return fields


def write_cache(environ: dict[str, str], identity_before: str | None, runtime: str, debug_log: str | None,
                markers: list[str] = (), rules: list[tuple[str, str]] = ()) -> str | None:
    """Record runtime (and the request markers) for the launcher, if the config file is still the one
    that was read (identity_before, taken before reading it). A cache that cannot be written only
    costs speed. Returns the file's path when it was (re)written, else None."""
    config = config_path_string(environ)
    if identity_before is None or config_identity(config) != identity_before:
        return None
    target = cache_file(environ)
    if target is None:
        return None
    text = render(config, identity_before, search_path(environ), runtime, debug_log, markers, rules)
    if text is None:
        return None
    data = seal(text.encode("utf-8"))
    if read_trusted_bytes(target) == data:
        return None
    return target if write_cache_file(target, data, ".runtime-cache") else None


def write_cache_file(target: str, data: bytes, temp_prefix: str) -> bool:
    """Replace target with data (a temp file beside it, mode 0644 whatever the umask: the launcher
    refuses group/other-writable files, then a rename). Best effort: False, and a debug line, if not."""
    from cdi.new_file import create_new_file   # writing is rare: not imported at every start

    directory = os.path.dirname(target)
    tmp = None
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = create_new_file(directory, f"{temp_prefix}.{os.getpid()}.", "", 0o644)
        try:
            written = 0
            while written < len(data):   # a short write (a full disk, a signal) must not leave half a cache
                written += os.write(fd, data[written:])
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        tmp = None
        log.debug("cache written: %s", target)
        return True
    except OSError as exc:
        log.debug("cannot write the cache %s: %s", target, exc)
        return False
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
