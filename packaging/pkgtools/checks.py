"""Sanity checks of a staged package tree, in the spirit of lintian: run by the build before a
package is written (any problem stops it) and by the tests on the packages' contents."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from pkgtools.metadata import elf_files, elf_info

# Symlinks that may point outside the package: the interpreter the environment runs on.
EXTERNAL_LINK_PREFIXES = ("/usr/bin/python3",)


def leaked_strings(tree: Path, needles: list[str]) -> list[str]:
    """Files (contents or symlink targets) under tree that contain one of needles, e.g. the temp
    dirs of the build or the build user's home: a package must not know where it was built."""
    wanted = [n.encode() for n in needles if n]
    problems = []
    for path in sorted(tree.rglob("*")):
        if path.is_symlink():
            data = os.readlink(path).encode()
        elif path.is_file():
            data = path.read_bytes()
        else:
            continue
        for needle in wanted:
            if needle in data:
                problems.append(f"/{path.relative_to(tree)} contains {needle.decode()!r}")
    return problems


def bad_runpaths(tree: Path) -> list[str]:
    """ELF files that would load libraries from a fixed directory (only $ORIGIN-relative is allowed)."""
    problems = []
    for path in elf_files(tree):
        for entry in elf_info(path).runpath:
            if entry and not entry.startswith("$ORIGIN"):
                problems.append(f"/{path.relative_to(tree)} has RUNPATH/RPATH {entry}")
    return problems


def bad_modes(tree: Path) -> list[str]:
    """Only 0755 directories, 0644 or 0755 files, nothing setuid or world-writable; under /etc only
    plain 0644 files; symlinks resolve inside the package (or to the system interpreter)."""
    problems = []
    for path in sorted(tree.rglob("*")):
        rel = "/" + str(path.relative_to(tree))
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            # where the link points once installed, and whether that is in the package
            installed = os.path.normpath(os.path.join(os.path.dirname(rel), target))
            if target.startswith("/"):
                problems.append(f"{rel} is an absolute symlink to {target} (Debian policy: relative)")
            elif not (installed.startswith(EXTERNAL_LINK_PREFIXES) or os.path.lexists(tree / installed.lstrip("/"))):
                problems.append(f"{rel} is a dangling symlink to {target}")
        elif stat.S_ISDIR(st.st_mode):
            if mode != 0o755:
                problems.append(f"{rel}/ has mode {mode:04o}, not 0755")
        elif stat.S_ISREG(st.st_mode):
            if mode not in (0o644, 0o755):
                problems.append(f"{rel} has mode {mode:04o}, not 0644 or 0755")
            if rel.startswith("/etc/") and mode != 0o644:
                problems.append(f"{rel} is a configuration file with mode {mode:04o}, not 0644")
        else:
            problems.append(f"{rel} is not a file, directory or symlink")
    return problems


def all_problems(tree: Path, needles: list[str]) -> list[str]:
    return bad_modes(tree) + bad_runpaths(tree) + leaked_strings(tree, needles)
