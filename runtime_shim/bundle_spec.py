"""Reading and rewriting a bundle's config.json.

The rewrite is atomic: a temp file in the same directory (so rename stays on one filesystem), written,
given the original's mode and owner, fsynced, renamed over config.json, and the directory fsynced.
A reader (runc, a crash, a concurrent `runc state`) sees the old file or the new one, never a part.
Every field is kept, the ones the shim knows nothing about included: the document is parsed into plain
dicts and lists, changed where the edits say, and written back whole.

config.json must be a regular file in the bundle itself: a symlink there is refused (opened with
O_NOFOLLOW, as the prestart hook reads it), since writing the edits through it would change a file
outside the bundle. The rename replaces the directory entry, never what a link there points to.
"""
from __future__ import annotations

import errno
import os
import stat

from cdi import json_codec
from cdi.regular_file import read_regular_file
from runtime_shim.errors import ShimError

CONFIG_NAME = "config.json"
MAX_SPEC_BYTES = 64 * 1024 * 1024


def spec_path(bundle: str) -> str:
    return os.path.join(bundle, CONFIG_NAME)


def read_spec(bundle: str) -> tuple[dict, bytes]:
    """(the parsed config.json, its exact bytes)."""
    path = spec_path(bundle)
    try:
        # a FIFO there must not hang the shim (the launcher's scan skips a non-regular file too and
        # leaves it to us)
        data, _ = read_regular_file(path, MAX_SPEC_BYTES, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ShimError("the OCI spec is a symbolic link (refused: the edits would be written outside "
                            "the bundle)", path) from None
        raise ShimError(f"cannot read the OCI spec: {exc.strerror}", path) from None
    except ValueError as exc:
        raise ShimError(f"the OCI spec is {exc}", path) from None
    try:
        document = json_codec.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ShimError(f"the OCI spec is not valid JSON: {exc}", path) from None
    if not isinstance(document, dict):
        raise ShimError("the OCI spec is not a JSON object", path)
    return document, data


def write_spec(bundle: str, document: dict) -> None:
    """Replace config.json with document, atomically, keeping its mode and owner. The bundle's own entry
    is replaced: a symlink at config.json is never followed (read_spec refuses one already)."""
    path = spec_path(bundle)
    directory = os.path.dirname(path)
    data = json_codec.dumps_compact(document).encode("utf-8")
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ShimError(f"cannot stat the OCI spec: {exc.strerror}", path) from None
    if not stat.S_ISREG(st.st_mode):  # replaced since read_spec opened it
        raise ShimError("the OCI spec is no longer a regular file", path)
    tmp = None
    try:
        name = _temp_name(directory)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        tmp = name  # ours from here on: removed again if anything below fails
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, st.st_uid, st.st_gid)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        tmp = None
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise ShimError(f"cannot write the OCI spec: {exc.strerror}", exc.filename or path) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _temp_name(directory: str) -> str:
    return os.path.join(directory, f".{CONFIG_NAME}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
