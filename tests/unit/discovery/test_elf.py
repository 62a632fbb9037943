"""cdi.elf on real gcc-built shared objects and on broken ones."""
from __future__ import annotations

import os
import random

import pytest

from cdi.elf import EM_386, EM_X86_64, ElfError, read_elf_library

from .helpers import build_library


def test_64bit_library_soname(tmp_path):
    lib = build_library(str(tmp_path / "libcuda.so.550.54.15"), "libcuda.so.1")
    info = read_elf_library(lib)
    assert (info.is_64bit, info.machine, info.soname) == (True, EM_X86_64, "libcuda.so.1")


def test_32bit_library_soname(tmp_path):
    lib = build_library(str(tmp_path / "libcuda.so.550.54.15"), "libcuda.so.1", bits=32)
    info = read_elf_library(lib)
    assert (info.is_64bit, info.machine, info.soname) == (False, EM_386, "libcuda.so.1")


def test_library_without_soname(tmp_path):
    lib = build_library(str(tmp_path / "libplain.so"), None)
    assert read_elf_library(lib).soname is None


def test_executable_is_not_a_library(tmp_path):
    src = tmp_path / "main.c"
    src.write_text("int main(void) { return 0; }\n")
    exe = tmp_path / "main"
    os.system(f"gcc -no-pie -o {exe} {src}")
    with pytest.raises(ElfError, match="not a shared object"):
        read_elf_library(str(exe))


def test_not_elf(tmp_path):
    path = tmp_path / "text.so"
    path.write_text("INPUT(-lfoo)\n")  # a linker script, as some lib*.so files are
    with pytest.raises(ElfError, match=f"not an ELF file \\({path}\\)"):
        read_elf_library(str(path))


def test_symlink_is_not_followed(tmp_path):
    lib = build_library(str(tmp_path / "libx.so.1.0"), "libx.so.1")
    os.symlink(lib, tmp_path / "libx.so.1")
    with pytest.raises(ElfError, match="cannot open"):
        read_elf_library(str(tmp_path / "libx.so.1"))


def test_truncations_and_flips_raise_only_elf_error(tmp_path):
    lib = build_library(str(tmp_path / "libx.so.1.0"), "libx.so.1")
    data = open(lib, "rb").read()
    broken_path = tmp_path / "broken.so"
    cuts = list(range(0, 512)) + list(range(512, len(data), 37))
    variants = [data[:n] for n in cuts]
    rng = random.Random(7)
    for _ in range(1500):
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            # mostly where the structure lives: the headers and the dynamic section region
            flipped[rng.randrange(min(len(data), 0x4000))] = rng.randrange(256)
        variants.append(bytes(flipped))
    outcomes = {"ok": 0, "error": 0}
    for variant in variants:
        broken_path.write_bytes(variant)
        try:
            info = read_elf_library(str(broken_path))
        except ElfError:
            outcomes["error"] += 1
        else:
            assert info.soname is None or isinstance(info.soname, str)
            outcomes["ok"] += 1
    assert outcomes["ok"] and outcomes["error"]
