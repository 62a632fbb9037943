"""Reading a file that an engine or an admin wrote (a bundle's config.json, a CDI spec, config.toml, an
engine's config): bounded, and without blocking. The runtime shim and the prestart hook read
config.json through it, every program config.toml, `nvidia-ctk runtime configure` the engines' files.
Stdlib only; cheap to import on the container start path."""
from __future__ import annotations

import os
import stat

from cdi.errors import ConfigError

CHUNK = 1 << 16

# The one size limit of a configuration file: config.toml, daemon.json, containerd's and CRI-O's TOML
# (main config and drop-in), podman's hooks.d file, the undo records of `runtime configure`. Real ones
# are a few KiB; the limit only keeps a link to /dev/zero or a runaway file from filling the memory.
MAX_CONFIG_BYTES = 1024 * 1024


def read_regular_file(path: str | os.PathLike, limit: int, *,
                      follow_symlinks: bool = True) -> tuple[bytes, os.stat_result]:
    """The bytes of `path` and the fstat of the very file read, taken after the read (the identity of
    exactly what was read: a file changed while it was read has a new mtime/ctime there).

    Opened with O_NONBLOCK, so a FIFO put in its place cannot hang the caller; only a regular file of
    at most `limit` bytes is read; without follow_symlinks a symlink at `path` is refused (ELOOP).
    Raises ValueError ("not a regular file", "larger than N bytes") for what the file is, OSError for
    what the system says."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > limit:
            raise ValueError(f"larger than {limit} bytes")
        chunks, size = [], 0
        while size <= limit:  # the file may grow after the fstat: never read more than limit + 1
            chunk = os.read(fd, min(CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError(f"larger than {limit} bytes")
        return b"".join(chunks), os.fstat(fd)
    finally:
        os.close(fd)


def read_config_file(path: str) -> tuple[bytes, os.stat_result] | None:
    """A configuration file's bytes (at most MAX_CONFIG_BYTES) and its fstat; None when it does not exist.

    A symlink is followed (admins keep config files elsewhere and link them, and these files are the
    admin's own, in root's directories), but what it leads to must be a regular file: a FIFO, a device
    (a link to /dev/zero), a directory is refused, and never blocks. ConfigError for anything else
    that keeps it from being read."""
    try:
        return read_regular_file(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ConfigError(f"cannot read config: {exc}", path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror or exc}", path) from None


def config_text(data: bytes, path: str) -> str:
    """A configuration file's bytes as text; ConfigError when they are not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config is not UTF-8 text (byte {exc.start})", path) from None
