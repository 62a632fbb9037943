"""The .rpm: a spec generated from packaging/rpm/gpu-container-toolkit.spec.in around the staged
tree, built with rpmbuild (Debian's rpm package works: the spec only copies staged files)."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

from pkgtools.errors import BuildError, run
from pkgtools.layout import (CONFIG_FILE, DEVICE_PLUGIN_CONFIG, DEVICE_PLUGIN_UNIT, DOC_DIR, MAN_DIR, UNITS, Staged,
                             completion_files, render)
from pkgtools.metadata import (DESCRIPTION, NVIDIA_VERSION, OLD_RUNTIME_PACKAGE, PROVIDED, REPLACED, RUNTIMES, SUMMARY,
                               ChangelogEntry, rpm_changelog)
from pkgtools.source import Project
from pkgtools.venv_build import PREFIX


def rpm_requires(python: str, library_requires: list[str]) -> list[str]:
    return [f"({' or '.join(RUNTIMES)})", python, *library_requires]


def relations() -> str:
    """The same swap with NVIDIA's packages as the .deb declares (see metadata.PROVIDED); rpm ignores
    a conflict with a name the package provides itself."""
    lines = [f"Provides:       {name} = {NVIDIA_VERSION}" for name in PROVIDED]
    lines += [f"Conflicts:      {name}" for name in REPLACED]
    lines.append("Conflicts:      " + " ".join(OLD_RUNTIME_PACKAGE))
    return "\n".join(lines)


def files_section(staged: Staged) -> str:
    """Every path the package owns: whole directories it alone owns, single files elsewhere."""
    lines = [PREFIX, f"%dir {os.path.dirname(CONFIG_FILE)}", f"%dir {os.path.dirname(DEVICE_PLUGIN_CONFIG)}"]
    for conffile in staged.conffiles:
        lines.append(f"%config(noreplace) {conffile}")
    lines.extend(f"/usr/bin/{name}" for name in staged.programs)
    for unit_file in sorted((staged.root / staged.flavour.unit_dir.lstrip("/")).iterdir()):
        lines.append(f"{staged.flavour.unit_dir}/{unit_file.name}")
    for rule in sorted((staged.root / staged.flavour.udev_dir.lstrip("/")).iterdir()):
        lines.append(f"{staged.flavour.udev_dir}/{rule.name}")
    for preset in sorted((staged.root / staged.flavour.preset_dir.lstrip("/")).iterdir()):
        lines.append(f"{staged.flavour.preset_dir}/{preset.name}")
    # the manual pages and completion files, in directories other packages own
    lines.extend(f"{MAN_DIR}/{page.name}" for page in sorted((staged.root / MAN_DIR.lstrip("/")).iterdir()))
    # the completion dirs are co-owned (with their parents under /usr/share): without bash-completion,
    # zsh or fish installed nothing else owns them, and erasing the package must take them again
    completion_dirs = set()
    for program in staged.completions:
        for path in completion_files(staged.flavour, program).values():
            completion_dirs.update((os.path.dirname(path), os.path.dirname(os.path.dirname(path))))
    lines.extend(f"%dir {d}" for d in sorted(completion_dirs - {"/usr/share"}))
    for program in staged.completions:
        lines.extend(sorted(completion_files(staged.flavour, program).values()))
    lines.append(f"%dir {DOC_DIR}")
    for doc in sorted((staged.root / DOC_DIR.lstrip("/")).iterdir()):
        lines.append(f"%doc {DOC_DIR}/{doc.name}")
    # everything staged must be listed (rpmbuild only warns about unpackaged files)
    listed = {line.split(" ")[-1] for line in lines}
    for path in staged.root.rglob("*"):
        rel = "/" + str(path.relative_to(staged.root))
        if not path.is_dir() and not any(rel == p or rel.startswith(p + "/") for p in listed):
            raise BuildError("a staged file is missing from the rpm %files list", rel)
    return "\n".join(lines)


def build_rpm(staged: Staged, project: Project, version: str, release: str, requires: list[str],
              changelog: list[ChangelogEntry], packaging: Path, workdir: Path, out_dir: Path) -> Path:
    topdir = workdir / "rpmbuild"
    for sub in ("BUILD", "BUILDROOT", "SPECS", "RPMS", "SOURCES"):
        (topdir / sub).mkdir(parents=True, exist_ok=True)
    spec = topdir / "SPECS" / f"{project.name}.spec"
    spec.write_text(render(packaging / "rpm" / f"{project.name}.spec.in", {
        "NAME": project.name,
        "VERSION": version,
        "RELEASE": release,
        "SUMMARY": SUMMARY,
        "LICENSE": project.license,
        "REQUIRES": "\n".join(f"Requires:       {r}" for r in requires),
        "RELATIONS": relations(),
        "DESCRIPTION": "\n\n".join(textwrap.fill(p, 76, break_on_hyphens=False) for p in DESCRIPTION),
        "STAGE": str(staged.root),
        "PREFIX": PREFIX,
        "UNITS": " ".join(UNITS),
        "DEVICE_PLUGIN_UNIT": DEVICE_PLUGIN_UNIT,
        "FILES": files_section(staged),
        "CHANGELOG": rpm_changelog(changelog),
    }))
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"{project.name}-{version}-{release}.x86_64.rpm"
    run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {topdir}", "--define", f"_rpmdir {out_dir}",
         "--define", f"_build_name_fmt {name}", "--define", "_binary_payload w6.xzdio", "--define", "_buildhost localhost",
         "--define", "use_source_date_epoch_as_buildtime 1", "--define", "clamp_mtime_to_source_date_epoch 1",
         str(spec)], "rpmbuild")
    target = out_dir / name
    if not target.is_file():
        raise BuildError("rpmbuild wrote no package", str(target))
    return target
