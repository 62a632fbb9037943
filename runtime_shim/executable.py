"""Whether a low-level runtime candidate can be started, found out before config.json is edited.

`os.access(X_OK)` is not enough: a file with an x bit that the kernel cannot start (no ELF and no `#!`,
a script whose interpreter is missing, a dynamic ELF whose loader is missing) fails only at the exec,
after the bundle was rewritten. And a runtime that is one of this toolkit's own launchers (a `runc` in
PATH that is a link or copy of nvidia-container-runtime, its .cdi/.legacy names, another installation's
copy) would exec the shim again, for ever. So the file is read as the kernel reads it: the `#!` line,
or the ELF program headers (PT_INTERP, and the PT_NOTE segments, where every launcher carries the note
libcontainer_c/launcher_identity.c defines; the launcher's passthrough reads the same bytes).

Not covered, by design: binfmt_misc formats (a runtime is ELF or a script), and a wrapper script that
execs the shim (its content cannot tell). Stdlib only, no imports beyond os/stat/sys: the create path.
"""
from __future__ import annotations

import os
import stat
import sys

# launcher_identity.c's struct gct_launcher_note, as it is in the file (host byte order)
NOTE_NAME = b"gpu-container-toolkit\0"
NOTE_DESC = b"launcher\0"
NOTE_TYPE = 0x4C544347  # "GCTL"
LAUNCHER_NOTE = (len(NOTE_NAME).to_bytes(4, sys.byteorder) + len(NOTE_DESC).to_bytes(4, sys.byteorder)
                 + NOTE_TYPE.to_bytes(4, sys.byteorder) + NOTE_NAME.ljust(24, b"\0") + NOTE_DESC.ljust(12, b"\0"))
NOTE_SCAN = 65536   # bytes read of each note segment, as in C
MAX_PHNUM = 4096
PHDR_READ = 65536  # a program header table up to this size is read at once
SCRIPT_HEAD = 256   # the kernel reads this much of a #! line (BINPRM_BUF_SIZE)
MAX_DEPTH = 4       # interpreters of interpreters the kernel follows
PT_INTERP, PT_NOTE = 3, 4
LAUNCHER = "it is a launcher of this toolkit (the runtime shim would exec itself for ever), not a low-level runtime"


def _field(data: bytes, offset: int, size: int, order: str) -> int:
    return int.from_bytes(data[offset:offset + size], order)


def _elf_segments(fd: int, head: bytes) -> list[tuple[int, int, int]] | None:
    """(type, offset, filesz) of each program header; None when the headers cannot be read."""
    is64, order = head[4] == 2, "big" if head[5] == 2 else "little"
    if head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    phoff = _field(head, 32 if is64 else 28, 8 if is64 else 4, order)
    phentsize = _field(head, 54 if is64 else 42, 2, order)
    phnum = _field(head, 56 if is64 else 44, 2, order)
    entry = 56 if is64 else 32
    if phentsize < entry or not 0 < phnum <= MAX_PHNUM or phoff > 2 ** 62:
        return None
    # at most MAX_PHNUM entries, read in one go when the table is small (always, for real programs), else
    # entry by entry as launcher_identity.c reads them: a crafted size allocates nothing large; either
    # way the entries before the first one that is cut short count
    size = phentsize * phnum
    if size <= PHDR_READ:
        table = os.pread(fd, size, phoff)
        entries = [table[i:i + entry] for i in range(0, len(table) - entry + 1, phentsize)]
    else:
        entries = []
        for i in range(phnum):
            ph = os.pread(fd, entry, phoff + i * phentsize)
            if len(ph) < entry:
                break
            entries.append(ph)
    from_bytes = int.from_bytes
    if is64:
        return [(from_bytes(ph[0:4], order), from_bytes(ph[8:16], order), from_bytes(ph[32:40], order))
                for ph in entries]
    return [(from_bytes(ph[0:4], order), from_bytes(ph[4:8], order), from_bytes(ph[16:20], order))
            for ph in entries]


def _read_program(fd: int) -> tuple[str, str | None, bool]:
    """(kind: "elf", "script" or "other"; its interpreter; whether it carries the launcher note)."""
    head = os.pread(fd, SCRIPT_HEAD, 0)
    if head[:2] == b"#!":
        line = head[2:].split(b"\n", 1)[0].lstrip(b" \t")
        interpreter = line.split(None, 1)[0] if line.split() else b""
        return "script", os.fsdecode(interpreter) or None, False
    if len(head) < 64 or head[:4] != b"\x7fELF":
        return "other", None, False
    segments = _elf_segments(fd, head)
    if segments is None:
        return "other", None, False
    executable = _field(head, 16, 2, "big" if head[5] == 2 else "little") in (2, 3)  # ET_EXEC, ET_DYN
    interpreter, launcher = None, False
    for kind, offset, filesz in segments:
        if offset > 2 ** 62:
            continue
        if kind == PT_NOTE and LAUNCHER_NOTE in os.pread(fd, min(filesz, NOTE_SCAN), offset):
            launcher = True
        elif kind == PT_INTERP:
            interpreter = os.fsdecode(os.pread(fd, min(filesz, 4096), offset).split(b"\0", 1)[0]) or None
    # the note decides identity whatever the file type says (launcher_identity.c does not look at it)
    return ("elf" if executable else "other"), interpreter, launcher


def is_launcher(path: str) -> bool:
    """Whether path (followed) is a regular file carrying the launcher note: launcher_identity.c's test."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and _read_program(fd)[2]
    except OSError:
        return False
    finally:
        os.close(fd)


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
        kind, interpreter, launcher = _read_program(fd)
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
