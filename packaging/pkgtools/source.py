"""The source tree that goes into the packages: a snapshot of the checkout, and the project metadata.

The snapshot holds the files git would commit (tracked plus untracked-but-not-ignored), so build
output, virtualenvs and caches of the checkout never end up in a package, and the wheel is built
outside the checkout (other work in the same checkout is never disturbed by build/ or egg-info).
"""
from __future__ import annotations

import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pkgtools.errors import BuildError

# Used when the tree is not a git checkout (e.g. an unpacked source tarball).
IGNORED = {".git", ".venv", "build", "dist", "out", "__pycache__", ".pytest_cache"}


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    description: str
    license: str


def read_project(repo: Path) -> Project:
    path = repo / "pyproject.toml"
    try:
        table = tomllib.loads(path.read_text())["project"]
        if not isinstance(table["license"], str):
            raise TypeError("project.license is to be an SPDX expression (a string, PEP 639)")
        return Project(name=table["name"], version=table["version"], description=table["description"],
                       license=table["license"])
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise BuildError(f"cannot read the project metadata: {exc}", str(path)) from None


def _git_files(repo: Path) -> list[str] | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                               "--exclude-standard"], capture_output=True)
    except FileNotFoundError:
        return None
    if done.returncode != 0:
        return None
    return [name for name in done.stdout.decode().split("\0") if name]


def snapshot(repo: Path, dest: Path) -> Path:
    """Copy the source files of repo into dest (which must not exist); returns dest."""
    names = _git_files(repo)
    if names is None:
        shutil.copytree(repo, dest, symlinks=True,
                        ignore=lambda _d, entries: [e for e in entries
                                                    if e in IGNORED or e.endswith((".egg-info", ".so", ".o"))])
        return dest
    dest.mkdir(parents=True)
    for name in names:
        src = repo / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        if name.endswith((".so", ".o")):
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    return dest
