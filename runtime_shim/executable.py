"""Whether a low-level runtime candidate can be started, found out before config.json is edited.

`os.access(X_OK)` is not enough: a file with an x bit that the kernel cannot start (no ELF and no `#!`,
a script whose interpreter is missing, a dynamic ELF whose loader is missing) fails only at the exec,
after the bundle was rewritten. And a runtime that is one of this toolkit's own launchers (a `runc` in
PATH that is a link or copy of nvidia-container-runtime, its .cdi/.legacy names, another installation's
copy) would exec the shim again, for ever. So the file is read as the kernel reads it: the `#!` line,
or the ELF program headers (PT_INTERP, and the PT_NOTE segments, where every launcher carries the note
launcher/launcher_identity.c defines: cdi.launcher_identity reads both).

Not covered, by design: binfmt_misc formats (a runtime is ELF or a script), and a wrapper script that
execs the shim (its content cannot tell). Stdlib only, no imports beyond os/stat/sys: the create path.
"""
from __future__ import annotations

import os
import stat

from cdi.launcher_identity import LAUNCHER_NOTE, is_launcher, read_program  # noqa: F401  (re-exported)

MAX_DEPTH = 4       # interpreters of interpreters the kernel follows
LAUNCHER = "it is a launcher of this toolkit (the runtime shim would exec itself for ever), not a low-level runtime"


def start_problem(path: str, depth: int = 0) -> str | None:
    """Why the kernel could not start path as the low-level runtime (None: it can, as far as a look at
    the file tells; one that vanishes or changes between this look and the exec still fails there)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{exc.strerror.lower()}" if exc.strerror else "cannot be looked at"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not os.access(path, os.X_OK):
        return "not executable"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None  # executable but not readable by us (a non-root caller): the exec will tell
    try:
        kind, interpreter, launcher = read_program(fd)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    finally:
        os.close(fd)
    if launcher:
        return LAUNCHER
    if kind == "other":
        return "neither an ELF executable nor a #! script"
    if interpreter is None:
        return "a #! line without an interpreter" if kind == "script" else None
    if depth >= MAX_DEPTH:
        return "too many levels of #! interpreters"
    problem = start_problem(interpreter, depth + 1)
    if problem is not None:
        return f"its {'interpreter' if kind == 'script' else 'loader'} {interpreter!r} is unusable: {problem}"
    return None
