"""inotify for tests: what was made, removed or renamed at the top of some directories meanwhile (a
file written and removed again leaves no trace in a listing, but it does here)."""
from __future__ import annotations

import ctypes
import os
import struct

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
CHANGES = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
_NAMES = {IN_MODIFY: "modified", IN_ATTRIB: "attributes changed", IN_MOVED_FROM: "moved away",
          IN_MOVED_TO: "moved in", IN_CREATE: "created", IN_DELETE: "removed"}
_EVENT = struct.Struct("iIII")

_libc = ctypes.CDLL(None, use_errno=True)


class DirWatch:
    """Watches the entries of each of dirs (`label` -> path to watch, e.g. through /proc/PID/root):
    `changes()` lists each change seen since, as "<label>/<name>: created"."""

    def __init__(self, dirs: dict[str, str]):
        self._fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._labels = {}
        for label, path in dirs.items():
            wd = _libc.inotify_add_watch(self._fd, os.fsencode(path), CHANGES)
            if wd < 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), path)
            self._labels[wd] = label

    def changes(self) -> list[str]:
        seen = []
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return seen
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size:offset + _EVENT.size + length].rstrip(b"\0").decode(errors="replace")
                offset += _EVENT.size + length
                what = ", ".join(text for bit, text in _NAMES.items() if mask & bit) or f"event {mask:#x}"
                seen.append(f"{self._labels.get(wd, '?').rstrip('/')}/{name}: {what}")

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> DirWatch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
