"""Builders for discovery tests: real ELF libraries (gcc), real caches (ldconfig), unix sockets,
and a hand-written ld.so.cache for entries no ldconfig would write (hostile paths)."""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import socket
import struct
import subprocess
import tempfile

_BUILD_DIR = tempfile.mkdtemp(prefix="discovery-libs-")
atexit.register(shutil.rmtree, _BUILD_DIR, True)

_SOURCE = "int nvidia_test_symbol(void) { return 42; }\n"


@functools.lru_cache(maxsize=None)
def _compiled(soname: str | None, bits: int) -> str:
    """Compile one tiny shared object per (soname, bits) and reuse it: gcc is the slow part."""
    source = os.path.join(_BUILD_DIR, "lib.c")
    if not os.path.exists(source):
        with open(source, "w") as f:
            f.write(_SOURCE)
    out = os.path.join(_BUILD_DIR, f"lib-{bits}-{len(os.listdir(_BUILD_DIR))}.so")
    cmd = ["gcc", "-shared", "-fPIC", "-o", out, source]
    if bits == 32:
        # -nostdlib: no 32-bit libc needed; binutils still writes a real i386 ELF object.
        cmd[1:1] = ["-m32", "-nostdlib"]
    if soname is not None:
        cmd.append(f"-Wl,-soname,{soname}")
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def build_library(path: str, soname: str | None = None, bits: int = 64) -> str:
    """Write a real ELF shared object with DT_SONAME `soname` at `path`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copyfile(_compiled(soname, bits), path)
    os.chmod(path, 0o755)
    return path


def run_ldconfig(root: str, lib_dirs: list[str], *, fmt: str = "new") -> str:
    """Build <root>/etc/ld.so.cache with the real ldconfig over `lib_dirs` (paths inside root)."""
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc", "ld.so.conf"), "w") as f:
        f.write("".join(d + "\n" for d in lib_dirs))
    subprocess.run(["ldconfig", "-c", fmt, "-r", root], check=True, capture_output=True)
    return os.path.join(root, "etc", "ld.so.cache")


def ldconfig_print(cache: str) -> set[tuple[str, str, bool]]:
    """(soname, path, is_64bit) for every entry `ldconfig -p` prints for a cache file."""
    out = subprocess.run(["ldconfig", "-p", "-C", cache], check=True, capture_output=True,
                         text=True, errors="surrogateescape").stdout
    entries = set()
    for line in out.splitlines():
        if not line.startswith("\t") or " => " not in line:
            continue
        left, path = line.strip().split(" => ", 1)
        soname, _, desc = left.rpartition(" (")
        entries.add((soname, path, "64" in desc))
    return entries


def make_socket(path: str) -> None:
    """A unix socket file at `path` (it stays after the socket object is closed).

    Bound under a short temp name and renamed into place: sun_path holds only 108 bytes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    short = tempfile.mkdtemp(prefix="sock-")
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(os.path.join(short, "s"))
        os.rename(os.path.join(short, "s"), path)
    finally:
        shutil.rmtree(short, ignore_errors=True)


X86_64_LIBC6 = 0x0303
I386_ELF = 0x0001


def write_ld_cache(path: str, entries: list[tuple[str, str, int]], *,
                   old_block: int | None = None, pad_old_block: bool = True) -> bytes:
    """Write a new-format cache holding (soname, path, flags) entries, byte by byte as glibc
    lays it out; `old_block=N` puts an old-format block of N entries in front."""
    strings = bytearray()
    offsets = []
    header_and_entries = 48 + 24 * len(entries)
    for soname, lib_path, _ in entries:
        key = header_and_entries + len(strings)
        strings += soname.encode() + b"\0"
        value = header_and_entries + len(strings)
        strings += lib_path.encode() + b"\0"
        offsets.append((key, value))
    new = bytearray(b"glibc-ld.so.cache1.1")
    new += struct.pack("<IIB3xI12x", len(entries), len(strings), 2, 0)
    for (_, _, flags), (key, value) in zip(entries, offsets):
        new += struct.pack("<iIIIQ", flags, key, value, 0, 0)
    new += strings
    data = bytes(new)
    if old_block is not None:
        old = bytearray(b"ld.so-1.7.0\0" + struct.pack("<I", old_block))
        old += b"".join(struct.pack("<iII", 1, 0, 0) for _ in range(old_block))
        if pad_old_block:
            old += b"\0" * (-len(old) % 8)
        data = bytes(old) + data
    with open(path, "wb") as f:
        f.write(data)
    return data
