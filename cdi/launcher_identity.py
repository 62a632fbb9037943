"""Whether a file is one of this toolkit's launchers (launcher/launcher.c): every launcher binary
carries the ELF note launcher/launcher_identity.c defines, in a PT_NOTE segment (`strip` keeps
it), whatever name, link or copy it is reached by. The runtime shim asks it of its low-level runtime
(it must never exec itself), `cdi generate` of a --nvidia-cdi-hook-path (ours takes one chained entry,
NVIDIA's program one entry per subcommand). The launcher's passthrough reads the same bytes in C.

Stdlib only, no imports beyond os/stat/sys: the shim's create path reads it.
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
PT_INTERP, PT_NOTE = 3, 4


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


def read_program(fd: int) -> tuple[str, str | None, bool]:
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


def is_launcher_fd(fd: int) -> bool:
    """Whether the open file is a regular file carrying the launcher note."""
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and read_program(fd)[2]
    except OSError:
        return False


def is_launcher(path: str) -> bool:
    """Whether path (followed) is a regular file carrying the launcher note: launcher_identity.c's test."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return is_launcher_fd(fd)
    finally:
        os.close(fd)
