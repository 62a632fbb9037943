"""A reader for glibc's dynamic linker cache, /etc/ld.so.cache.

Layout (glibc "new" format, the only one ld.so reads since glibc 2.32):

    [optional old block]  "ld.so-1.7.0", pad, u32 nlibs, nlibs x 12-byte entries,
                          zero padding up to an 8-byte boundary
    new header (48 bytes) "glibc-ld.so.cache" "1.1", u32 nlibs, u32 len_strings,
                          u8 endianness, 3 pad, u32 extension_offset, 3 x u32 unused
    nlibs x 24 bytes      {i32 flags, u32 key, u32 value, u32 osversion, u64 hwcap}
    strings               NUL-terminated; key/value offsets count from the new header

The file may be written by anyone who controls a driver root, so every offset is checked before
use: a truncated or corrupted file raises LdCacheError naming the file and the problem, and
nothing else (no IndexError, struct.error or UnicodeError) escapes.
"""
from __future__ import annotations

import os
import struct

from cdi.errors import CdiError

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"

_OLD_HEADER = struct.Struct("<11sxI")          # magic, pad byte, nlibs: 16 bytes
_OLD_ENTRY_SIZE = 12                           # {i32 flags, u32 key, u32 value}
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")   # magic+version, nlibs, len_strings, endianness, ext
_NEW_ENTRY = struct.Struct("<iIIIQ")           # 24 bytes
_NEW_ALIGN = 8                                 # __alignof__(struct cache_file_new) on 64-bit hosts

# Values of the header's endianness byte (glibc >= 2.33 writes one; older writers leave 0).
_ENDIAN_UNSET, _ENDIAN_INVALID, _ENDIAN_LITTLE, _ENDIAN_BIG = 0, 1, 2, 3

FLAG_ELF = 0x0001
FLAG_TYPE_MASK = 0x00ff
FLAG_ARCH_MASK = 0xff00

# flags & FLAG_ARCH_MASK -> (name, is_64bit). 0x0000 carries no arch bits: on x86 hosts that is i386.
ARCHITECTURES = {
    0x0000: ("i386", False),
    0x0300: ("x86-64", True),
    0x0400: ("s390x", True),
    0x0500: ("ppc64", True),
    0x0800: ("x32", False),
    0x0900: ("arm-hf", False),
    0x0a00: ("aarch64", True),
    0x0b00: ("arm-sf", False),
}

# Real caches are well under a megabyte; refuse to slurp something absurd into memory.
MAX_CACHE_SIZE = 64 * 1024 * 1024
# No library path is longer than PATH_MAX.
_MAX_STRING = 4096


class LdCacheError(CdiError):
    """The cache file (`where`) cannot be read or is not a valid ld.so.cache."""


class LdCacheEntry:
    """One entry of the cache, immutable. A plain class with __slots__ rather than a cdi.record.Record:
    a host's cache holds hundreds of entries, read at every GPU container start, and a generic
    constructor would cost more than the parse."""
    __slots__ = ("soname", "path", "flags", "hwcap")

    soname: str     # the lookup key, e.g. "libcuda.so.1"
    path: str       # where ld.so finds it, as seen from the root the cache was built for
    flags: int
    hwcap: int

    def __init__(self, soname: str, path: str, flags: int, hwcap: int = 0) -> None:
        set_field = object.__setattr__
        set_field(self, "soname", soname)
        set_field(self, "path", path)
        set_field(self, "flags", flags)
        set_field(self, "hwcap", hwcap)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def _key(self) -> tuple:
        return (self.soname, self.path, self.flags, self.hwcap)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"LdCacheEntry(soname={self.soname!r}, path={self.path!r}, flags={self.flags!r}, "
                f"hwcap={self.hwcap!r})")

    @property
    def is_elf(self) -> bool:
        return bool(self.flags & FLAG_ELF)

    @property
    def arch_flag(self) -> int:
        return self.flags & FLAG_ARCH_MASK

    @property
    def arch(self) -> str:
        known = ARCHITECTURES.get(self.arch_flag)
        return known[0] if known else f"unknown-0x{self.arch_flag:04x}"

    @property
    def is_64bit(self) -> bool:
        known = ARCHITECTURES.get(self.arch_flag)
        return known[1] if known else False


def read_ld_cache(path: str) -> list[LdCacheEntry]:
    """Parse the cache file at `path` (followed if it is a symlink: use cdi.driver_root for roots)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CACHE_SIZE + 1)
    except OSError as e:
        raise LdCacheError(where=path, what=f"cannot read: {e.strerror or e}") from None
    return parse_ld_cache(data, path)


def parse_ld_cache(data: bytes, source: str = "<ld.so.cache>") -> list[LdCacheEntry]:
    """Parse the bytes of an ld.so.cache; `source` names the file in error messages."""
    if len(data) > MAX_CACHE_SIZE:
        raise LdCacheError(where=source, what=f"larger than {MAX_CACHE_SIZE} bytes, not an ld.so.cache")
    view = memoryview(data)
    start = _new_header_offset(view, source)
    return _parse_new_format(view[start:], source)


def _new_header_offset(view: memoryview, source: str) -> int:
    """Offset of the new-format header: 0, or just after an old-format block."""
    if bytes(view[:len(NEW_MAGIC)]) == NEW_MAGIC:
        return 0
    if bytes(view[:len(OLD_MAGIC)]) != OLD_MAGIC:
        raise LdCacheError(where=source, what=f"not an ld.so.cache (bad magic)")
    if len(view) < _OLD_HEADER.size:
        raise LdCacheError(where=source, what=f"truncated in the old-format header")
    _, old_count = _OLD_HEADER.unpack_from(view, 0)
    end_of_old = _OLD_HEADER.size + old_count * _OLD_ENTRY_SIZE
    if end_of_old > len(view):
        raise LdCacheError(
            where=source, what=f"truncated: old-format block claims {old_count} entries, "
            f"file has {len(view)} bytes")
    aligned = (end_of_old + _NEW_ALIGN - 1) & ~(_NEW_ALIGN - 1)
    # Writers pad to the alignment of the new header; very old ones did not pad at all.
    for offset in dict.fromkeys((aligned, end_of_old)):
        if bytes(view[offset:offset + len(NEW_MAGIC)]) == NEW_MAGIC:
            return offset
    raise LdCacheError(
        where=source, what=f"old-format ld.so.cache without a new-format section (not supported)")


def _parse_new_format(view: memoryview, source: str) -> list[LdCacheEntry]:
    if len(view) < _NEW_HEADER.size:
        raise LdCacheError(where=source, what=f"truncated in the header ({len(view)} of "
                           f"{_NEW_HEADER.size} bytes)")
    _, count, _len_strings, endianness, _ext = _NEW_HEADER.unpack_from(view, 0)
    if endianness == _ENDIAN_BIG:
        raise LdCacheError(where=source, what=f"big-endian ld.so.cache (written for another machine)")
    if endianness not in (_ENDIAN_UNSET, _ENDIAN_LITTLE):
        raise LdCacheError(where=source, what=f"invalid endianness marker {endianness}")
    entries_end = _NEW_HEADER.size + count * _NEW_ENTRY.size
    if entries_end > len(view):
        raise LdCacheError(
            where=source, what=f"truncated: header claims {count} entries "
            f"({entries_end} bytes), only {len(view)} present")
    entries = []
    for index, (flags, key, value, _osv, hwcap) in enumerate(
            _NEW_ENTRY.iter_unpack(view[_NEW_HEADER.size:entries_end])):
        soname = _string_at(view, key, source, index, "name")
        path = _string_at(view, value, source, index, "path")
        entries.append(LdCacheEntry(soname=soname, path=path, flags=flags, hwcap=hwcap))
    return entries


def _string_at(view: memoryview, offset: int, source: str, index: int, what: str) -> str:
    if offset >= len(view):
        raise LdCacheError(where=source, what=f"entry {index}: {what} offset {offset} "
                           f"is past the end of the file")
    chunk = bytes(view[offset:offset + _MAX_STRING + 1])
    end = chunk.find(b"\0")
    if end < 0:
        raise LdCacheError(where=source, what=f"entry {index}: {what} at offset {offset} "
                           f"is not NUL-terminated")
    if end == 0:
        raise LdCacheError(where=source, what=f"entry {index}: empty {what}")
    # Paths are bytes to the kernel; keep undecodable bytes as surrogates like os.listdir does.
    return os.fsdecode(chunk[:end])
