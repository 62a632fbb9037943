"""Tells when a file of one name is created in a folder (inotify IN_CREATE / IN_MOVED_TO), as NVIDIA's
plugin watches for a new kubelet.sock (fsnotify). A stat alone cannot always tell: a file system may give
the new socket the old one's freed inode, and its times can fall in the same clock tick.

inotify through ctypes (libc's inotify_init1 and inotify_add_watch): the plugin is a long-running service,
so ctypes' import is no cost worth a dependency. Where inotify is not available the watch says so once
(`available` false) and the caller falls back to comparing the file's identity.
"""
from __future__ import annotations

import os
import struct

IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT_HEADER = struct.Struct("iIII")   # wd, mask, cookie, len; then len bytes of NUL-padded name


class CreatedWatch:
    def __init__(self, folder: str, name: str):
        self.name = os.fsencode(name)
        self.fd = -1
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(folder), IN_CREATE | IN_MOVED_TO) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    @property
    def available(self) -> bool:
        return self.fd >= 0

    def created(self) -> bool:
        """Whether the file was created since the last call (reads every pending event, never blocks)."""
        seen = False
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + _EVENT_HEADER.size <= len(data):
                _wd, _mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
                name = data[offset + _EVENT_HEADER.size:offset + _EVENT_HEADER.size + length].rstrip(b"\0")
                seen = seen or name == self.name
                offset += _EVENT_HEADER.size + length
        return seen

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
