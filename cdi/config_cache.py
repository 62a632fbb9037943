"""The parsed config.toml kept between runs of the prestart hook and nvidia-container-cli, so that a
container start need not parse TOML.

Why: importing tomllib (with typing, datetime, string and its regular expressions) cost the hook
about 6 ms of CPU in 46 at every GPU container start (9 ms in a bare interpreter), for a file that
rarely changes.

What is kept: the TOML document as tomllib returned it (tables, strings, booleans, numbers, lists),
as JSON, with the config's path and the identity of the file it was parsed from, (st_dev, st_ino,
st_size, st_mtime_ns, st_ctime_ns) taken by fstat on the descriptor the config was read through. A
kept document is used only while all of these match; no one can set a ctime back, so an edit in
place is always seen (as in the runtime shim's passthrough cache). The document still goes through
every check of cdi.config at each run: the cache spares the parse, never a check or a warning.
Documents JSON cannot hold exactly (TOML dates, inf, nan) are not kept.

Trust: the cache says as much as the config does (which ldconfig runs, whether cgroups are set), so
a file is used only if it and its directory are owned by our euid and writable by no one else, and
it is opened without following links. Anything else (missing, foreign, malformed) is ignored and the
config parsed as usual. Writing is best effort: a read-only or full /run only costs speed.
NVIDIA_CTK_CACHE_DIR is trusted as NVIDIA_CTK_CONFIG_FILE_PATH is: both come from the program's own
environment, for the hook the env list the shim writes or Docker fills from dockerd's, never the
image's (docs/reference.md#hook-env: every hook we add carries a non-empty env). A relative one is ignored.

Where: `$NVIDIA_CTK_CACHE_DIR`, else /run/nvidia-container-toolkit for the system config (the
runtime shim's cache dir: a tmpfs, nothing outlives a boot). A config named by
NVIDIA_CTK_CONFIG_FILE_PATH or -config without NVIDIA_CTK_CACHE_DIR is not cached: such configs are
mostly tests' and one-off files, and a program started for them must leave nothing in /run.
"""
from __future__ import annotations

import os
import stat
import time

from cdi import json_codec

CACHE_DIR_ENV = "NVIDIA_CTK_CACHE_DIR"
DEFAULT_CACHE_DIR = "/run/nvidia-container-toolkit"
MAGIC = "gct-config-cache 1"
MAX_CACHE_BYTES = 2 << 20   # the config itself is at most 1 MiB
RECENT_NS = 2_000_000_000  # a config changed less than this ago is not kept (see write_document)


def cache_dir_for(config_path: str, system_config: str, environ: dict | None = None) -> str | None:
    """Where to keep the document of config_path (see the module docstring); None: do not cache."""
    environ = os.environ if environ is None else environ
    if environ.get(CACHE_DIR_ENV):
        return environ[CACHE_DIR_ENV] if environ[CACHE_DIR_ENV].startswith("/") else None
    return DEFAULT_CACHE_DIR if config_path == system_config else None


def identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def fnv1a64(text: str) -> int:
    value = 0xCBF29CE484222325
    for byte in os.fsencode(text):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def _file_name(config_path: str) -> str:
    return f"config-{fnv1a64(config_path):016x}.json"


def _ours(st: os.stat_result) -> bool:
    """Owned by our euid and writable by no one else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _open_dir(directory: str) -> int | None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if _ours(os.fstat(fd)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_trusted_file(directory: str, name: str, max_bytes: int) -> bytes | None:
    """The content of directory/name when both are trustworthy (owned by our euid, writable by no one
    else, the file regular, not a link, at most max_bytes); else None. Shared by every cache we keep
    (this one, cdi.driver_files_cache): one set of trust rules."""
    dir_fd = _open_dir(directory)
    if dir_fd is None:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or not _ours(st) or st.st_size > max_bytes:
                return None
            data = f.read(max_bytes + 1)
            return data if len(data) <= max_bytes else None   # it grew after the fstat
    except OSError:
        return None
    finally:
        os.close(dir_fd)


def read_document(directory: str, config_path: str, config_stat: os.stat_result) -> dict | None:
    """The kept document of the config file described by config_stat; None when there is no
    trustworthy, matching one. Read by cdi.json_codec: json.loads' values without importing json and
    re at every container start."""
    data = read_trusted_file(directory, _file_name(config_path), MAX_CACHE_BYTES)
    if data is None:
        return None
    try:
        kept = json_codec.loads(data)
    except (ValueError, RecursionError):
        return None
    if (not isinstance(kept, dict) or kept.get("magic") != MAGIC or kept.get("config") != config_path
            or kept.get("identity") != identity(config_stat) or not isinstance(kept.get("document"), dict)):
        return None
    return kept["document"]


def write_document(directory: str, config_path: str, config_stat: os.stat_result, document: dict) -> None:
    """Keep document for the config file described by config_stat (best effort, atomic by rename).
    config_stat must be taken after the read. A file changed in the last seconds is not kept: ctime
    has the kernel's coarse clock tick, so a write racing with our read could leave the same
    identity; one made later than that always shows in the ctime."""
    if time.time_ns() - config_stat.st_ctime_ns < RECENT_NS:
        return
    write_trusted_file(directory, _file_name(config_path),
                       {"magic": MAGIC, "config": config_path, "identity": identity(config_stat),
                        "document": document})


def write_trusted_file(directory: str, name: str, kept: dict) -> None:
    """Keep `kept` as JSON in directory/name (best effort, atomic by rename; the directory is made if
    missing, and used only if trustworthy). Nothing is kept that JSON cannot give back exactly (a TOML
    date or time, inf, nan)."""
    try:
        os.mkdir(directory, 0o755)
    except OSError:
        pass     # exists (checked below), or cannot be made (then nothing is kept)
    # The directory first: where it is not ours (LXC's unprivileged hook sees the host root's cache
    # as the overflow uid's) nothing can be kept, and this runs at every start; json (with re) costs
    # ~3 ms to import.
    dir_fd = _open_dir(directory)
    if dir_fd is None:
        return
    import json   # writing is rare: only reading is on every start

    from cdi.new_file import create_new_file

    tmp = None
    try:
        text = json.dumps(kept, allow_nan=False)
    except (TypeError, ValueError):
        os.close(dir_fd)
        return
    try:
        fd, tmp = create_new_file("", f".{name}.{os.getpid()}.", "", 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, 0o644)  # whatever the umask: a group/other-writable file would be refused
            f.write(text.encode())
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
    finally:
        os.close(dir_fd)
