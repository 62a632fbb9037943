"""The wheel, and the self-contained Python environment the system packages install.

The root-run programs are static launchers that bake the interpreter path and the import path of
the installation into the binary (launcher/install_launchers.py), and pip writes absolute
shebangs. So the environment is built AT its final path, /usr/lib/gpu-container-toolkit, without
touching the build host: in a private mount namespace (`unshare -m`) an overlay is mounted over
/usr/lib whose upper layer is a temp dir. Everything the build writes there lands in that layer;
the host's /usr/lib never changes and the mount disappears with the namespace.

Inside, on Debian's /usr/bin/python3 (never the first python3 on PATH, docs/reference.md#building):
  1. python3.X -m venv PREFIX
  2. pip wheel the source snapshot (the compiled cffi module goes into the wheel)
  3. pip install the wheel and its dependencies into PREFIX (no .pyc: postinst compiles them)
  4. install_launchers PREFIX/bin (the root-run programs, with PREFIX's paths baked in); record
     each program's --help and nvidia-ctk's completion scripts (manpages.collect: the manual pages
     and completion files are made from them)
  5. drop what a packaged environment does not need (pip, setuptools, activate scripts, the
     test-only launcher probe, other distributions' console scripts), strip debug info from the
     ELF files (it names the temp build dirs), hard-link the identical launchers
  6. copy PREFIX into the staging root

Run `python3 venv_build.py --help` for the inner step; build_environment() is the outer one.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__":  # run inside the namespace by path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pkgtools import manpages
from pkgtools.errors import BuildError, run
from pkgtools.metadata import is_elf as _is_elf

PREFIX = "/usr/lib/gpu-container-toolkit"
SYSTEM_PYTHON = "/usr/bin/python3"
# Console scripts we ship; every other file pip puts into bin/ (from dependencies) is dropped.
KEPT_SCRIPTS = {"nvidia-ctk"}
TEST_ONLY_PROGRAMS = {"gct-launcher-probe", "gct-launcher-probe-ctk"}
DROPPED_DISTRIBUTIONS = ("setuptools", "pip")


@dataclass(frozen=True)
class Environment:
    wheel: Path              # the project's wheel
    tree: Path               # the environment, as it is to be installed at PREFIX
    python: str              # the interpreter it runs on, e.g. /usr/bin/python3.11
    distributions: list[str]  # "name==version" of everything installed into it
    programs: list[str]      # the launcher-started programs in its bin/
    manuals: dict            # their --help texts and completion scripts (manpages.collect)


def system_python(python: str = SYSTEM_PYTHON) -> str:
    """The versioned interpreter behind Debian's python3 (the environment links to it, so a later
    change of the default python3 does not break the installed environment)."""
    if not os.path.exists(python):
        raise BuildError("Debian's python3 is not installed (apt-get install python3-venv python3-dev)", python)
    done = run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], "asking python3 its version")
    versioned = f"/usr/bin/python{done.stdout.strip()}"
    if not os.path.exists(versioned):
        raise BuildError("the versioned interpreter behind python3 is missing", versioned)
    return versioned


def clean_env(pip_cache: Path) -> dict[str, str]:
    """pip's environment: no PYTHON* variables, no pyenv first on PATH; pip's own settings and the
    proxy settings of the build host stay. The cache is our own: pip's default one may hold wheels
    that another interpreter built (with its RUNPATH baked in)."""
    keep = {k: v for k, v in os.environ.items()
            if k.startswith("PIP_") or k.lower().endswith("_proxy") or k in ("HOME", "SSL_CERT_FILE", "CC", "SOURCE_DATE_EPOCH")}
    return {**keep, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "PIP_CACHE_DIR": str(pip_cache),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def build_environment(source: Path, workdir: Path, wheel_dir: Path, pip_cache: Path,
                      python: str | None = None) -> Environment:
    """Build the wheel into wheel_dir and the environment under workdir/tree (see the module doc);
    pip_cache is kept between builds (only this build's interpreter fills it)."""
    if os.geteuid() != 0:
        raise BuildError("building the packaged environment needs root (a private mount namespace with an "
                         "overlay over /usr/lib)", "unshare")
    python = python or system_python()
    upper, ovl_work, tree = workdir / "overlay-upper", workdir / "overlay-work", workdir / "tree"
    for d in (upper, ovl_work):
        d.mkdir(parents=True)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    report = workdir / "environment.json"
    run(["unshare", "--mount", "--propagation", "private", python, "-I", str(Path(__file__).resolve()),
         "--source", str(source), "--upper", str(upper), "--overlay-work", str(ovl_work), "--tree", str(tree),
         "--wheel-dir", str(wheel_dir), "--python", python, "--report", str(report)],
        "building the Python environment in a private mount namespace", env=clean_env(pip_cache))
    data = json.loads(report.read_text())
    shutil.rmtree(upper, ignore_errors=True)
    shutil.rmtree(ovl_work, ignore_errors=True)
    return Environment(wheel=Path(data["wheel"]), tree=tree, python=python,
                       distributions=data["distributions"], programs=data["programs"], manuals=data["manuals"])


# --- inside the namespace -------------------------------------------------------------------------

def _mount_overlay(upper: Path, work: Path) -> None:
    parent = os.path.dirname(PREFIX)
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={parent},upperdir={upper},workdir={work}", parent], f"mounting an overlay over {parent}")


def _pip(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run([f"{PREFIX}/bin/python", "-m", "pip", *args], f"pip {args[0]}", env=env)


def reproducible_build_env(source: Path) -> dict[str, str]:
    """The compiler sees the source dir (a temp dir, another one each build) as `.`: the debug info
    the C helper is compiled with names it, and the Build ID is a hash over that debug info, made
    before strip removes it. setuptools adds CFLAGS to Python's own flags."""
    flags = f"-ffile-prefix-map={source}=."
    return {**os.environ, "CFLAGS": f"{os.environ.get('CFLAGS', '')} {flags}".strip()}


def _prune(prefix: Path) -> None:
    _pip("uninstall", "--yes", "--quiet", *DROPPED_DISTRIBUTIONS)  # one call: pip removes itself last
    bindir = prefix / "bin"
    for entry in bindir.iterdir():
        if entry.is_symlink() and entry.name.startswith("python"):
            continue
        if entry.name in TEST_ONLY_PROGRAMS or not (_is_elf(entry) or entry.name in KEPT_SCRIPTS):
            entry.unlink()
    for cache in sorted(prefix.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)
    include = prefix / "include"
    if include.is_dir() and not any(p.is_file() for p in include.rglob("*")):
        shutil.rmtree(include)


def _strip(prefix: Path) -> None:
    """Debug sections name the temp dirs the C parts were compiled in; they also triple the size."""
    for path in prefix.rglob("*"):
        if path.is_file() and not path.is_symlink() and _is_elf(path):
            run(["strip", "--strip-unneeded", str(path)], "stripping an ELF file")


def _relative_interpreter_link(prefix: Path, python: str) -> None:
    """venv links bin/python3.X to the absolute interpreter path; Debian policy wants symlinks inside
    /usr relative (the environment still finds its home through pyvenv.cfg)."""
    link = prefix / "bin" / os.path.basename(python)
    if not (link.is_symlink() and os.readlink(link) == python):
        raise BuildError(f"the venv's interpreter link is not {python}", str(link))
    link.unlink()
    link.symlink_to(os.path.relpath(python, link.parent))


def _link_identical_launchers(bindir: Path) -> None:
    """The launchers are one binary under several names: hard links keep one copy (the launcher
    reads its name from /proc/self/exe, which names the link it was started through)."""
    first_by_content: dict[bytes, Path] = {}
    for path in sorted(bindir.iterdir()):
        if path.is_symlink() or not _is_elf(path):
            continue
        data = path.read_bytes()
        if data in first_by_content:
            tmp = path.with_name(f".{path.name}.link")
            os.link(first_by_content[data], tmp)
            os.replace(tmp, path)
        else:
            first_by_content[data] = path


def inner_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the in-namespace step of the environment build")
    for name in ("--source", "--upper", "--overlay-work", "--tree", "--wheel-dir", "--report"):
        parser.add_argument(name, type=Path, required=True)
    parser.add_argument("--python", required=True)
    args = parser.parse_args(argv)
    try:
        _mount_overlay(args.upper, args.overlay_work)
        prefix = Path(PREFIX)
        if prefix.exists():  # a package installed on the build host: hidden by a whiteout in the upper layer
            shutil.rmtree(prefix)
        run([args.python, "-m", "venv", PREFIX], "creating the virtual environment")
        _relative_interpreter_link(prefix, args.python)
        before = set(args.wheel_dir.glob("*.whl"))
        _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(args.wheel_dir), str(args.source),
             env=reproducible_build_env(args.source))
        built = sorted(set(args.wheel_dir.glob("*.whl")) - before) or sorted(args.wheel_dir.glob("*.whl"))
        if len(built) != 1:
            raise BuildError(f"expected one wheel, found {len(built)}", str(args.wheel_dir))
        wheel = built[0]
        # by name from --find-links, so pip records no file:// URL of the temp dir (direct_url.json)
        name_version = wheel.name.split("-")[:2]
        _pip("install", "--quiet", "--no-compile", "--find-links", str(args.wheel_dir),
             f"{name_version[0]}=={name_version[1]}")
        installed = run([f"{PREFIX}/bin/python", "-I", "-m", "launcher.install_launchers", f"{PREFIX}/bin"],
                        "installing the launchers", cwd="/")
        first = installed.stdout.splitlines()[0] if installed.stdout else ""   # the programs in bin/
        programs = first.split(":", 1)[1].split() if ":" in first else []
        programs = [p for p in programs if p not in TEST_ONLY_PROGRAMS]
        try:  # the programs' own --help and completion scripts, for the manual pages (run where they are installed)
            manuals = manpages.collect(f"{PREFIX}/bin", sorted({*programs, *KEPT_SCRIPTS}))
        except RuntimeError as exc:
            raise BuildError(f"the manual pages: {exc}", f"{PREFIX}/bin") from None
        _prune(prefix)
        _strip(prefix)
        _link_identical_launchers(prefix / "bin")
        freeze = run([f"{PREFIX}/bin/python", "-I", "-c",
                      "import importlib.metadata as m\n"
                      "for d in sorted(m.distributions(), key=lambda d: d.metadata['Name'].lower()):\n"
                      "    print(f\"{d.metadata['Name']}=={d.version}\")"], "listing the installed distributions")
        run(["cp", "-a", PREFIX, str(args.tree)], "copying the environment out of the namespace")
        args.report.write_text(json.dumps({
            "wheel": str(wheel),
            "distributions": freeze.stdout.split(),
            "programs": programs,
            "manuals": manuals,
        }))
    except BuildError as exc:
        print(f"venv_build: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(inner_main())
