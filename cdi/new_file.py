"""Creating a file under a name no one else holds: how every writer here makes its temp file.

The name is prefix + a random hex token + suffix. The file is created with O_EXCL (never an existing
file), O_NOFOLLOW (never through a link planted under the name) and O_CLOEXEC (no runtime we exec
inherits it), write-only. A name already taken is retried with a new token. `mode` is what open(2)
gets, so the umask still applies: callers that need an exact mode fchmod the file themselves.

tempfile.mkstemp does the same, but importing tempfile (with random, shutil, bz2, lzma ...) costs
milliseconds on paths that run at every container start; this imports nothing.
"""
from __future__ import annotations

import errno
import os

FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
ATTEMPTS = 100


def create_new_file(folder: str, prefix: str, suffix: str = "", mode: int = 0o600, *,
                    token_bytes: int = 4, dir_fd: int | None = None) -> tuple[int, str]:
    """Create and open a new file `folder/PREFIX<token>SUFFIX` (folder relative to dir_fd when one is
    given; "" for dir_fd itself): (fd, its path as passed to open). Errors other than a name taken
    are raised as they come; FileExistsError if every try found its name taken."""
    for _ in range(ATTEMPTS):
        path = os.path.join(folder, f"{prefix}{os.urandom(token_bytes).hex()}{suffix}")
        try:
            return os.open(path, FLAGS, mode, dir_fd=dir_fd), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free name for a new file after {ATTEMPTS} tries",
                          os.path.join(folder, f"{prefix}*{suffix}"))


def write_atomically(path: str, text: str, default_mode: int = 0o644) -> None:
    """Replace path with text in one rename, keeping an existing file's mode and owner. A symlinked
    config (e.g. managed elsewhere) is written through, not replaced by a regular file."""
    path = os.path.realpath(path)
    folder, base = os.path.split(path)
    try:
        st = os.stat(path)
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    except FileNotFoundError:
        mode, owner = default_mode, None
    os.makedirs(folder, exist_ok=True)
    fd, tmp = create_new_file(folder, f".{base}.", ".tmp", 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if owner is not None:
                os.fchown(f.fileno(), *owner)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
