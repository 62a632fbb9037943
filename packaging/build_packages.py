#!/usr/bin/python3
"""Build the packages of gpu-container-toolkit: the wheel, a .deb and an .rpm.

    make packages                      (= /usr/bin/python3 packaging/build_packages.py --out dist)
    packaging/build_packages.py --out DIR [--formats deb,rpm] [--work DIR] [--pip-cache DIR]

Needs root (the Python environment is built at its final path, /usr/lib/gpu-container-toolkit,
inside a private mount namespace; the host is not changed), gcc, dpkg-deb, rpmbuild, and PyPI for
the dependencies. See docs/packaging.md.
"""
from __future__ import annotations

import argparse
import email.utils
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pkgtools import checks, deb, layout, metadata, rpm  # noqa: E402
from pkgtools.errors import BuildError  # noqa: E402
from pkgtools.source import read_project, snapshot  # noqa: E402
from pkgtools.venv_build import build_environment  # noqa: E402

REPO = HERE.parent
FORMATS = ("deb", "rpm")


def leak_needles(*paths: Path) -> list[str]:
    """Strings no packaged file may contain: the build's temp and source dirs, the builder's caches,
    and pyenv (the interpreter the environment must NOT come from). Not the whole home directory:
    wheels from PyPI name their own builders' homes (e.g. Rust sources under /root/.cargo)."""
    needles = [str(p) for p in paths]
    home = os.environ.get("HOME")
    if home and home != "/":
        needles.append(home.rstrip("/") + "/.cache/")
    needles.append("/.pyenv/")
    return needles


def build(out_dir: Path, formats: tuple[str, ...], workdir: Path, pip_cache: Path) -> list[Path]:
    project = read_project(REPO)
    changelog = metadata.parse_changelog((HERE / "changelog").read_text(), "packaging/changelog")
    latest = changelog[0]
    upstream, _, revision = latest.version.rpartition("-")
    if latest.package != project.name or upstream != project.version:
        raise BuildError(f"the newest changelog entry is {latest.package} {latest.version}, but pyproject.toml "
                         f"says {project.name} {project.version}", "packaging/changelog")
    # file dates, archive member dates and the rpm build time are the changelog's date, not the build's
    os.environ.setdefault("SOURCE_DATE_EPOCH",
                          str(int(email.utils.parsedate_to_datetime(latest.date).timestamp())))
    source = snapshot(REPO, workdir / "source")
    env = build_environment(source, workdir / "env", workdir / "wheels", pip_cache)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = [Path(shutil.copy2(env.wheel, out_dir / env.wheel.name))]

    sonames = sorted(metadata.external_sonames(env.tree))
    copyright_text = layout.render(HERE / "debian" / "copyright", {
        "BUNDLED": "\n ".join(d.replace("==", " ") for d in env.distributions)})
    changelog_text = (HERE / "changelog").read_text()
    needles = leak_needles(workdir, REPO, pip_cache)
    for fmt in formats:
        flavour = layout.DEB if fmt == "deb" else layout.RPM
        staged = layout.stage(flavour, env, HERE, REPO / "docs", workdir / f"stage-{fmt}", copyright_text,
                              changelog_text, project.version)
        problems = checks.all_problems(staged.root, needles)
        if problems:
            raise BuildError("the staged files failed the sanity checks:\n  " + "\n  ".join(problems[:20]),
                             str(staged.root))
        if fmt == "deb":
            depends = deb.debian_depends(env.python, metadata.debian_library_dependencies(sonames))
            built.append(deb.build_deb(staged, project, latest.version, latest.maintainer, depends, HERE,
                                       workdir, out_dir))
        else:
            requires = rpm.rpm_requires(env.python, metadata.rpm_library_dependencies(env.tree))
            built.append(rpm.build_rpm(staged, project, upstream, revision, requires, changelog, HERE, workdir,
                                       out_dir))
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_packages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the packages go [dist]")
    parser.add_argument("--formats", default=",".join(FORMATS), help="deb,rpm or one of them [deb,rpm]")
    parser.add_argument("--work", type=Path, help="work dir, kept afterwards [a temp dir, removed]")
    parser.add_argument("--pip-cache", type=Path, default=REPO / "build" / "package-cache" / "pip",
                        help="pip's cache for this build, kept between builds [build/package-cache/pip]")
    args = parser.parse_args(argv)
    formats = tuple(f for f in args.formats.split(",") if f)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        print(f"build_packages: error: unknown format {', '.join(unknown)} (--formats)", file=sys.stderr)
        return 2
    started = time.monotonic()
    workdir = args.work or Path(tempfile.mkdtemp(prefix="gct-packages-"))
    try:
        if args.work:
            if workdir.exists() and any(workdir.iterdir()):
                raise BuildError("the work dir is not empty", str(workdir))
            workdir.mkdir(parents=True, exist_ok=True)
        built = build(args.out.resolve(), formats, workdir.resolve(), args.pip_cache.resolve())
    except BuildError as exc:
        print(f"build_packages: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.work:
            shutil.rmtree(workdir, ignore_errors=True)
    for path in built:
        print(f"built {path} ({path.stat().st_size // 1024} KiB)")
    print(f"in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
