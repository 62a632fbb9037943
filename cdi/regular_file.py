"""Reading a file that an engine or an admin wrote (a bundle's config.json, a CDI spec): bounded, and
without blocking. The runtime shim and the prestart hook read config.json through it. Stdlib only;
cheap to import on the container start path."""
from __future__ import annotations

import os
import stat

CHUNK = 1 << 16


def read_regular_file(path: str | os.PathLike, limit: int, *,
                      follow_symlinks: bool = True) -> tuple[bytes, os.stat_result]:
    """The bytes of `path` and the fstat of the very file read.

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
        return b"".join(chunks), st
    finally:
        os.close(fd)
