"""cdi.ldcache against caches written by the real ldconfig, and against broken ones."""
from __future__ import annotations

import os
import random
import re
import struct

import pytest

from cdi.ldcache import LdCacheEntry, LdCacheError, parse_ld_cache, read_ld_cache

from .helpers import (I386_ELF, X86_64_LIBC6, build_library, ldconfig_print, run_ldconfig,
                      write_ld_cache)


def _as_tuples(entries: list[LdCacheEntry]) -> set[tuple[str, str, bool]]:
    return {(e.soname, e.path, e.is_64bit) for e in entries}


@pytest.fixture
def small_root(tmp_path):
    """A root with 64-bit and 32-bit libraries and a real cache for it."""
    root = str(tmp_path / "root")
    build_library(f"{root}/opt/lib64/libalpha.so.1.2.3", "libalpha.so.1")
    build_library(f"{root}/opt/lib64/libbeta.so.7", "libbeta.so.7")
    os.symlink("libalpha.so.1", f"{root}/opt/lib64/libalpha.so")
    build_library(f"{root}/opt/lib32/libgamma.so.2.0", "libgamma.so.2", bits=32)
    return root


@pytest.mark.parametrize("fmt", ["new", "compat"])
def test_cache_from_real_ldconfig_matches_ldconfig_p(small_root, fmt):
    cache = run_ldconfig(small_root, ["/opt/lib64", "/opt/lib32"], fmt=fmt)
    entries = read_ld_cache(cache)
    assert _as_tuples(entries) == ldconfig_print(cache)
    by_name = {(e.soname, e.is_64bit): e for e in entries}
    alpha = by_name[("libalpha.so.1", True)]
    assert alpha.path == "/opt/lib64/libalpha.so.1"
    assert alpha.is_elf and alpha.arch == "x86-64"
    gamma = by_name[("libgamma.so.2", False)]
    assert gamma.path == "/opt/lib32/libgamma.so.2"
    assert gamma.is_elf and gamma.arch == "i386" and not gamma.is_64bit


def test_compat_cache_has_an_old_block_and_the_same_entries(small_root):
    dirs = ["/opt/lib64", "/opt/lib32"]
    run_ldconfig(small_root, dirs)  # the first run makes the soname links the later runs see
    compat = open(run_ldconfig(small_root, dirs, fmt="compat"), "rb").read()
    new = open(run_ldconfig(small_root, dirs, fmt="new"), "rb").read()
    assert compat.startswith(b"ld.so-1.7.0") and new.startswith(b"glibc-ld.so.cache1.1")
    assert _as_tuples(parse_ld_cache(compat)) == _as_tuples(parse_ld_cache(new))


def test_host_cache_matches_ldconfig_p():
    if not os.path.exists("/etc/ld.so.cache"):
        pytest.skip("this host has no /etc/ld.so.cache")
    entries = read_ld_cache("/etc/ld.so.cache")
    assert len(entries) > 0
    assert _as_tuples(entries) == ldconfig_print("/etc/ld.so.cache")


@pytest.mark.parametrize("count,padded", [(0, True), (1, True), (2, True), (3, True),
                                          (3, False), (5, False)])
def test_old_block_of_any_length_is_skipped(tmp_path, count, padded):
    entries = [("libx.so.1", "/lib/libx.so.1", X86_64_LIBC6), ("liby.so.2", "/l32/y", I386_ELF)]
    data = write_ld_cache(str(tmp_path / "c"), entries, old_block=count, pad_old_block=padded)
    assert data.startswith(b"ld.so-1.7.0")
    parsed = parse_ld_cache(data)
    assert [(e.soname, e.path, e.flags) for e in parsed] == entries


def test_every_truncation_is_a_clear_error_or_the_full_result(small_root):
    cache = run_ldconfig(small_root, ["/opt/lib64", "/opt/lib32"], fmt="compat")
    data = open(cache, "rb").read()
    full = parse_ld_cache(data, cache)
    errors = 0
    for length in range(len(data)):
        try:
            parsed = parse_ld_cache(data[:length], cache)
        except LdCacheError as e:
            assert e.where == cache and str(e).endswith(f"({cache})")
            errors += 1
        else:
            # Only the tail after the last string (ldconfig's extension section) may be lost.
            assert parsed == full, f"truncated to {length} bytes parsed differently"
    assert errors > len(data) // 2


def test_random_byte_flips_raise_only_ldcache_error(small_root):
    cache = run_ldconfig(small_root, ["/opt/lib64", "/opt/lib32"], fmt="compat")
    data = open(cache, "rb").read()
    rng = random.Random(5)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(4000):
        broken = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            broken[rng.randrange(len(broken))] = rng.randrange(256)
        try:
            result = parse_ld_cache(bytes(broken), "flipped")
        except LdCacheError:
            outcomes["error"] += 1
        else:
            assert all(isinstance(e, LdCacheEntry) and e.soname and e.path for e in result)
            outcomes["ok"] += 1
    assert outcomes["ok"] and outcomes["error"]


def _new_only(tmp_path) -> bytes:
    return write_ld_cache(str(tmp_path / "c"), [("libx.so.1", "/lib/libx.so.1", X86_64_LIBC6)])


def test_bad_magic(tmp_path):
    with pytest.raises(LdCacheError, match=r"^not an ld.so.cache \(bad magic\) \(somefile\)$"):
        parse_ld_cache(b"\x7fELF" + b"\0" * 100, "somefile")


def test_entry_count_larger_than_file(tmp_path):
    data = bytearray(_new_only(tmp_path))
    struct.pack_into("<I", data, 20, 0xFFFFFFFF)
    with pytest.raises(LdCacheError, match="claims 4294967295 entries"):
        parse_ld_cache(bytes(data))


def test_old_block_count_larger_than_file(tmp_path):
    data = bytearray(write_ld_cache(str(tmp_path / "c"), [], old_block=1))
    struct.pack_into("<I", data, 12, 0x10000000)
    with pytest.raises(LdCacheError, match="old-format block claims"):
        parse_ld_cache(bytes(data))


def test_string_offset_past_end(tmp_path):
    data = bytearray(_new_only(tmp_path))
    struct.pack_into("<I", data, 48 + 8, len(data) + 100)   # value of entry 0
    with pytest.raises(LdCacheError, match="entry 0: path offset .* past the end"):
        parse_ld_cache(bytes(data))


def test_unterminated_string(tmp_path):
    data = _new_only(tmp_path)
    with pytest.raises(LdCacheError, match="not NUL-terminated"):
        parse_ld_cache(data[:-1])


def test_big_endian_cache_is_refused(tmp_path):
    data = bytearray(_new_only(tmp_path))
    data[28] = 3
    with pytest.raises(LdCacheError, match="big-endian"):
        parse_ld_cache(bytes(data))


def test_old_format_only_is_refused():
    data = b"ld.so-1.7.0\0" + struct.pack("<I", 1) + struct.pack("<iII", 1, 0, 0) + b"x\0"
    with pytest.raises(LdCacheError, match="without a new-format section"):
        parse_ld_cache(data)


def test_empty_and_tiny_files():
    for data in (b"", b"g", b"glibc-ld.so.cache1.1", b"ld.so-1.7.0"):
        with pytest.raises(LdCacheError):
            parse_ld_cache(data)


def test_missing_file_names_the_path(tmp_path):
    missing = str(tmp_path / "nope" / "ld.so.cache")
    with pytest.raises(LdCacheError, match=f"cannot read: No such file or directory \\({re.escape(missing)}\\)"):
        read_ld_cache(missing)


def test_non_utf8_path_survives(tmp_path):
    raw = bytearray(_new_only(tmp_path))
    raw[raw.index(b"/lib/libx") + 5] = 0xff
    (entry,) = parse_ld_cache(bytes(raw))
    assert os.fsencode(entry.path) == b"/lib/\xffibx.so.1"
