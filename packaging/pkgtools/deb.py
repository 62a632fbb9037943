"""The .deb: control file, conffiles, md5sums and maintainer scripts around a staged tree, built
with dpkg-deb (files owned by root whoever builds)."""
from __future__ import annotations

import hashlib
import os
import textwrap
from pathlib import Path

from pkgtools.errors import BuildError, run
from pkgtools.layout import Staged, copy_tree, render, set_mtimes, substitutions, tree_size_kib
from pkgtools.metadata import DESCRIPTION, NVIDIA_VERSION, OLD_RUNTIME_PACKAGE, PROVIDED, REPLACED, RUNTIMES, SUMMARY
from pkgtools.source import Project

MAINTAINER_SCRIPTS = ("postinst", "prerm", "postrm")


def description_field(summary: str, paragraphs: list[str]) -> str:
    lines = [f"Description: {summary}"]
    for i, paragraph in enumerate(paragraphs):
        if i:
            lines.append(" .")
        lines.extend(" " + line for line in textwrap.wrap(paragraph, 74, break_on_hyphens=False))
    return "\n".join(lines)


def control_text(project: Project, version: str, maintainer: str, depends: list[str], suggests: list[str],
                 installed_kib: int) -> str:
    name, relation, old_version = OLD_RUNTIME_PACKAGE
    old_runtime = f"{name} ({relation} {old_version})"
    fields = [
        ("Package", project.name),
        ("Version", version),
        ("Architecture", "amd64"),
        ("Maintainer", maintainer),
        ("Installed-Size", str(installed_kib)),
        ("Depends", ", ".join(depends)),
        ("Suggests", ", ".join(suggests)),
        ("Breaks", old_runtime),
        ("Conflicts", ", ".join(REPLACED)),
        ("Replaces", ", ".join([*REPLACED, old_runtime])),
        ("Provides", ", ".join(f"{name} (= {NVIDIA_VERSION})" for name in PROVIDED)),
        ("Section", "admin"),
        ("Priority", "optional"),
    ]
    return "".join(f"{k}: {v}\n" for k, v in fields if v) + description_field(SUMMARY, DESCRIPTION) + "\n"


def debian_depends(python: str, library_packages: list[str]) -> list[str]:
    """The interpreter the environment links to, the low-level runtimes, the libraries of its C parts."""
    versioned = os.path.basename(python)  # python3.11
    major_minor = versioned.removeprefix("python")
    return [versioned, f"python3 (>= {major_minor})", " | ".join(RUNTIMES), *library_packages]


def md5sums(root: Path) -> str:
    lines = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.relative_to(root).parts[0] != "DEBIAN":
            lines.append(f"{hashlib.md5(path.read_bytes()).hexdigest()}  {path.relative_to(root)}\n")
    return "".join(lines)


def build_deb(staged: Staged, project: Project, version: str, maintainer: str, depends: list[str],
              packaging: Path, workdir: Path, out_dir: Path) -> Path:
    root = workdir / "deb-root"
    copy_tree(staged.root, root)
    control_dir = root / "DEBIAN"
    control_dir.mkdir(mode=0o755)
    os.chmod(control_dir, 0o755)
    # gcc: `nvidia-ctk simulate create` compiles the simulated driver
    text = control_text(project, version, maintainer, depends, ["gcc"], tree_size_kib(staged.root))
    (control_dir / "control").write_text(text)
    (control_dir / "conffiles").write_text("".join(f"{c}\n" for c in staged.conffiles))
    (control_dir / "md5sums").write_text(md5sums(root))
    for name in ("control", "conffiles", "md5sums"):
        os.chmod(control_dir / name, 0o644)
    values = substitutions(staged.flavour)
    for name in MAINTAINER_SCRIPTS:
        script = control_dir / name
        script.write_text(render(packaging / "debian" / name, values))
        os.chmod(script, 0o755)
    set_mtimes(root)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{project.name}_{version}_amd64.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(target)], "dpkg-deb --build")
    if not target.is_file():
        raise BuildError("dpkg-deb wrote no package", str(target))
    return target
