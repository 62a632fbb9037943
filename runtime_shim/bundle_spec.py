"""Reading and rewriting a bundle's config.json.

The rewrite is atomic: a temp file in the same directory (so rename stays on one filesystem), written,
given the original's mode and owner, fsynced, renamed over config.json, and the directory fsynced.
A reader (runc, a crash, a concurrent `runc state`) sees the old file or the new one, never a part.
Every field is kept, the ones the shim knows nothing about included: the document is parsed into plain
dicts and lists, changed where the edits say, and written back whole.

config.json must be a regular file in the bundle itself: a symlink there is refused (opened with
O_NOFOLLOW, as the prestart hook reads it), since writing the edits through it would change a file
outside the bundle. The rename replaces the directory entry, never what a link there points to.

A writer killed between creating its temp file and the rename (SIGKILL) leaves the file behind; the next
write in that bundle removes it (remove_stale_temp_files: by a lock the writer holds, not by age).
"""
from __future__ import annotations

import errno
import os
import stat

from cdi import json_codec
from cdi.oci_config import check_config_json
from cdi.regular_file import read_regular_file
from runtime_shim.errors import ShimError

CONFIG_NAME = "config.json"
TEMP_PREFIX, TEMP_SUFFIX = f".{CONFIG_NAME}.", ".tmp"
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
    except RecursionError:
        raise ShimError("the OCI spec is nested too deeply", path) from None
    if not isinstance(document, dict):
        raise ShimError("the OCI spec is not a JSON object", path)
    check_config_json(document, data)   # every member the shim reads has its type: one line naming it if not
    return document, data


def write_spec(bundle: str, document: dict) -> None:
    """Replace config.json with document, atomically, keeping its mode and owner. The bundle's own entry
    is replaced: a symlink at config.json is never followed (read_spec refuses one already)."""
    write_spec_bytes(bundle, json_codec.dumps_compact(document).encode("utf-8"))


def write_spec_bytes(bundle: str, data: bytes) -> None:
    """Replace config.json with data as write_spec does (also: put back the bytes read_spec read, when
    the runtime cannot be exec'd after the edits)."""
    path = spec_path(bundle)
    directory = os.path.dirname(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ShimError(f"cannot stat the OCI spec: {exc.strerror}", path) from None
    if not stat.S_ISREG(st.st_mode):  # replaced since read_spec opened it
        raise ShimError("the OCI spec is no longer a regular file", path)
    remove_stale_temp_files(directory)
    tmp = None
    try:
        fd, tmp = _create_locked_temp(directory)  # ours from here on: removed again if anything below fails
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, st.st_uid, st.st_gid)
            os.fsync(fd)
            os.rename(tmp, path)  # still locked: until here the temp file is visibly in use
            tmp = None
        finally:
            os.close(fd)
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


def _create_locked_temp(directory: str) -> tuple[int, str]:
    """A new temp file of ours, open and locked (see remove_stale_temp_files): (fd, path). The name is
    what is_temp_name (and the C launcher's is_temp_name in create_fastpath.c) expects."""
    from cdi.new_file import create_new_file   # only when config.json changes: not at every create

    for _ in range(8):
        fd, name = create_new_file(directory, f"{TEMP_PREFIX}{os.getpid()}.", TEMP_SUFFIX, 0o600)
        try:
            os.lockf(fd, os.F_LOCK, 0)
            # a cleaner that took the lock between our create and our lock has removed the name:
            # then start again with a new one
            if os.stat(name, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd, name
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "temp files keep disappearing", directory)


def is_temp_name(name: str) -> bool:
    """`.config.json.<pid>.<8 hex digits>.tmp`, the names write_spec gives its temp files."""
    if not (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
        return False
    pid, dot, token = name[len(TEMP_PREFIX):-len(TEMP_SUFFIX)].partition(".")
    return (bool(dot) and pid.isascii() and pid.isdigit() and len(token) == 8
            and all(c in "0123456789abcdef" for c in token))


def remove_stale_temp_files(directory: str) -> None:
    """Remove the temp files of writers that died (a SIGKILLed shim leaves one in the bundle).

    A writer holds a POSIX lock on its temp file from just after creating it until after the rename
    (_create_locked_temp), and the kernel drops the lock when the writer dies, whatever killed it. So an
    unlocked file of ours is a dead writer's, and one that is locked is in use: liveness, not age (a
    time limit would keep fresh leftovers and could still take a slow writer's file; a pid in the name
    could be reused, or belong to another pid namespace). The lock is taken before the unlink and held
    across it, so a writer that created its file an instant ago waits in its own lock, then finds its
    name gone and picks another. Only names of our pattern that are regular files are touched (lstat
    first: links, directories, FIFOs and devices are never opened), opened with O_NOFOLLOW; a file
    replaced between the lstat and the open is left alone. Best effort: nothing here fails a create."""
    try:
        names = [n for n in os.listdir(directory) if is_temp_name(n)]
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            # O_WRONLY: a POSIX write lock needs a descriptor open for writing (nothing is written)
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
                continue
            os.lockf(fd, os.F_TLOCK, 0)  # EAGAIN/EACCES: a live writer holds it
            if os.stat(path, follow_symlinks=False).st_ino == st.st_ino:
                os.unlink(path)
        except OSError:
            continue
        finally:
            os.close(fd)


