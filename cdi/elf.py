"""Just enough ELF to tell what a shared library is: its class, machine and DT_SONAME.

Discovery needs the soname of each driver library (the container gets a `SONAME -> file` link)
and must check that a file the cache or a directory scan offers really is a library of the
right class. The soname is found the way the dynamic loader finds it: PT_DYNAMIC, then DT_STRTAB
mapped through the PT_LOAD segments, so stripped section headers do not matter. Only the few
bytes needed are read with pread; every offset is bounds-checked and a malformed file raises
ElfError, never IndexError or struct.error.
"""
from __future__ import annotations

import os
import struct

from cdi.errors import CdiError
from cdi.record import Record

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 5, 10, 14

EM_386 = 3
EM_X86_64 = 62
EM_AARCH64 = 183

# Per class (1 = 32-bit, 2 = 64-bit): header after e_ident, program header, dynamic entry.
# Program headers are normalised to (type, offset, vaddr, filesz) below.
_LAYOUTS = {
    1: (struct.Struct("HHIIIIIHHHHHH"), struct.Struct("IIIIIIII"), struct.Struct("iI")),
    2: (struct.Struct("HHIQQQIHHHHHH"), struct.Struct("IIQQQQQQ"), struct.Struct("qQ")),
}
_MAX_PROGRAM_HEADERS = 4096
_MAX_DYNAMIC_SIZE = 1024 * 1024
_MAX_SONAME = 4096


class ElfError(CdiError):
    """The file (`where`) is not a readable ELF shared object."""


class ElfLibrary(Record, frozen=True):
    is_64bit: bool
    machine: int           # e_machine, e.g. EM_X86_64
    soname: str | None     # DT_SONAME, None when the library has none


def check_loadable(fd: int, path: str) -> ElfLibrary:
    """What read_elf_library says of the open file, after checking that the file holds every byte its
    headers promise: the program header table, each PT_LOAD segment (p_offset + p_filesz) and the
    section header table. The loader maps the segments; a page of them beyond the end of a truncated
    file is a SIGBUS on first touch, deep in the loader or in a call into the library."""
    reader = _Reader(fd, path)
    library = reader.library()
    for p_type, offset, _, filesz in reader.segments:
        if p_type == PT_LOAD and offset + filesz > reader.size:
            raise ElfError(where=path, what=f"truncated: a loaded segment ends at byte {offset + filesz}, "
                                            f"the file has {reader.size}")
    if reader.shnum and reader.shoff + reader.shnum * reader.shentsize > reader.size:
        raise ElfError(where=path, what=f"truncated: the section headers end at byte "
                                        f"{reader.shoff + reader.shnum * reader.shentsize}, the file has {reader.size}")
    return library


def read_elf_library(path: str, fd: int | None = None) -> ElfLibrary:
    """Describe the shared object at `path` (or already open as `fd`; `path` then only names it)."""
    if fd is not None:
        return _Reader(fd, path).library()
    try:
        own_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as e:
        raise ElfError(where=path, what=f"cannot open: {e.strerror or e}") from None
    try:
        return _Reader(own_fd, path).library()
    finally:
        os.close(own_fd)


class _Reader:
    def __init__(self, fd: int, path: str):
        self.fd = fd
        self.path = path
        try:
            self.size = os.fstat(fd).st_size
        except OSError as e:
            raise ElfError(where=path, what=f"cannot stat: {e.strerror or e}") from None

    def read(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ElfError(where=self.path, what=f"{what} lies outside the file")
        try:
            data = os.pread(self.fd, length, offset)
        except OSError as e:
            raise ElfError(where=self.path, what=f"cannot read: {e.strerror or e}") from None
        if len(data) != length:
            raise ElfError(where=self.path, what=f"short read of {what}")
        return data

    def library(self) -> ElfLibrary:
        ident = self.read(0, min(16, self.size), "ELF identification")
        if ident[:4] != ELF_MAGIC:
            raise ElfError(where=self.path, what=f"not an ELF file")
        if len(ident) < 16:
            raise ElfError(where=self.path, what=f"truncated ELF identification")
        elf_class, data_encoding = ident[4], ident[5]
        if elf_class not in _LAYOUTS or data_encoding not in (1, 2):
            raise ElfError(where=self.path, what=f"unknown ELF class {elf_class} or encoding {data_encoding}")
        self.order = "<" if data_encoding == 1 else ">"
        header_fmt, phdr_fmt, dyn_fmt = _LAYOUTS[elf_class]
        self.phdr = struct.Struct(self.order + phdr_fmt.format)
        self.dyn = struct.Struct(self.order + dyn_fmt.format)
        self.is_64bit = elf_class == 2
        header = struct.Struct(self.order + header_fmt.format)
        (e_type, machine, _version, _entry, phoff, self.shoff, _flags, _ehsize, phentsize, phnum,
         self.shentsize, self.shnum, _shstrndx) = header.unpack(self.read(16, header.size, "ELF header"))
        if e_type != ET_DYN:
            raise ElfError(where=self.path, what=f"not a shared object (ELF type {e_type})")
        self.segments = self._program_headers(phoff, phentsize, phnum)
        return ElfLibrary(self.is_64bit, machine, self._soname(self.segments))

    def _program_headers(self, phoff: int, phentsize: int, phnum: int) -> list[tuple[int, ...]]:
        if phnum == 0:
            return []
        if phnum > _MAX_PROGRAM_HEADERS or phentsize < self.phdr.size:
            raise ElfError(where=self.path, what=f"implausible program header table "
                           f"({phnum} entries of {phentsize} bytes)")
        table = self.read(phoff, phnum * phentsize, "program header table")
        segments = []
        for i in range(phnum):
            fields = self.phdr.unpack_from(table, i * phentsize)
            if self.is_64bit:   # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, ...
                segments.append((fields[0], fields[2], fields[3], fields[5]))
            else:               # p_type, p_offset, p_vaddr, p_paddr, p_filesz, ...
                segments.append((fields[0], fields[1], fields[2], fields[4]))
        return segments

    def _soname(self, segments: list[tuple[int, ...]]) -> str | None:
        dynamic = next((s for s in segments if s[0] == PT_DYNAMIC), None)
        if dynamic is None:
            return None
        _, offset, _, filesz = dynamic
        size = min(filesz, _MAX_DYNAMIC_SIZE) // self.dyn.size * self.dyn.size
        values: dict[int, int] = {}
        for tag, value in self.dyn.iter_unpack(self.read(offset, size, "dynamic section")):
            if tag == DT_NULL:
                break
            values.setdefault(tag, value)
        if DT_SONAME not in values:
            return None
        if DT_STRTAB not in values:
            raise ElfError(where=self.path, what=f"DT_SONAME without a string table")
        strtab = self._file_offset(values[DT_STRTAB], segments)
        name_offset = values[DT_SONAME]
        if DT_STRSZ in values and name_offset >= values[DT_STRSZ]:
            raise ElfError(where=self.path, what=f"DT_SONAME points past the string table")
        start = strtab + name_offset
        chunk = self.read(start, min(_MAX_SONAME, self.size - start), "soname")
        end = chunk.find(b"\0")
        if end <= 0:
            raise ElfError(where=self.path, what=f"empty or unterminated DT_SONAME")
        return os.fsdecode(chunk[:end])

    def _file_offset(self, address: int, segments: list[tuple[int, ...]]) -> int:
        for p_type, offset, vaddr, filesz in segments:
            if p_type == PT_LOAD and vaddr <= address < vaddr + filesz:
                return offset + (address - vaddr)
        raise ElfError(where=self.path, what=f"string table address 0x{address:x} is in no loaded segment")
