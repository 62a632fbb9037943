"""Build the static launcher and install it as each root-run program.

    python -m libcontainer_c.install_launchers BINDIR

Run with the interpreter the programs should use (the venv's, or the system package's). It bakes
that interpreter's path and the import path of this installation into the binary, so the launched
program needs nothing from the environment, and the toolkit's version (cdi.version) for --version.
Each program is a copy of the binary named after it
(the launcher picks the program by its own file name). nvidia-cdi-hook is C (cdi_hook/), linked
into the same binary with the C helper's sources (src/): it needs no interpreter at all.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LAUNCHER_SOURCE = PACKAGE_DIR / "launcher.c"
# Linked into the launcher: the native programs (nvidia-cdi-hook) and the C helper they use.
NATIVE_SOURCE_DIRS = (PACKAGE_DIR / "cdi_hook", PACKAGE_DIR / "src")

# Installed file name -> module that must exist for it to be installed, or None for a program
# written in C inside the launcher (always installed). Kept in step with the program table in
# launcher.c; tests check both agree.
PROGRAMS = {
    "nvidia-container-runtime": "runtime_shim.main",
    "nvidia-container-runtime.cdi": "runtime_shim.main",
    "nvidia-container-runtime.legacy": "runtime_shim.main",
    "nvidia-container-runtime-hook": "hook.prestart",
    "nvidia-cdi-hook": None,
    "nvidia-container-cli": "hook.cli",
    "gct-launcher-probe": "libcontainer_c.launcher_probe",
}


def c_string(text: str) -> str:
    """A C string literal for text (no trigraphs, every non-printable escaped)."""
    out = []
    for ch in text:
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode())
    return '"' + "".join(out) + '"'


def import_path() -> list[str]:
    """Where the installed packages and their dependencies are found, in order, without duplicates."""
    paths = [str(PACKAGE_DIR.parent)]
    scheme = sysconfig.get_paths()
    for key in ("purelib", "platlib"):
        paths.append(scheme[key])
    seen: list[str] = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    return seen


def toolkit_version() -> tuple[str, str]:
    """(name, version) of the toolkit, from the one source cdi.version reads."""
    sys.path.insert(0, str(PACKAGE_DIR.parent))
    try:
        from cdi.version import DISTRIBUTION, toolkit_version as version
    finally:
        sys.path.pop(0)
    return DISTRIBUTION, version()


def build_launcher(python: str, out: Path, cc: str = "cc") -> None:
    name, version = toolkit_version()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "launcher_config.h")
        config.write_text(
            "/* written by libcontainer_c/install_launchers.py */\n"
            f"#define GCT_PYTHON {c_string(python)}\n"
            f"#define GCT_SYS_PATH_LITERAL {c_string(repr(import_path()))}\n"
            f"#define GCT_TOOLKIT_NAME {c_string(name)}\n"
            f"#define GCT_TOOLKIT_VERSION {c_string(version)}\n"
        )
        sources = [str(p) for d in NATIVE_SOURCE_DIRS for p in sorted(d.glob("*.c"))]
        # unused C helper functions (the cffi module's) are dropped: --gc-sections
        cmd = [cc, "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
               "-ffunction-sections", "-fdata-sections", "-Wl,--gc-sections", f"-I{tmp}",
               *(f"-I{d}" for d in NATIVE_SOURCE_DIRS), str(LAUNCHER_SOURCE), *sources, "-o", str(out)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"install_launchers: error: compiling the launcher failed "
                             f"({' '.join(cmd)}):\n{result.stderr}")


def installable_programs() -> list[str]:
    sys.path.insert(0, str(PACKAGE_DIR.parent))
    try:
        return [name for name, module in PROGRAMS.items() if module is None or importlib.util.find_spec(module)]
    finally:
        sys.path.pop(0)


def install(bindir: Path, python: str) -> list[str]:
    bindir.mkdir(parents=True, exist_ok=True)
    built = bindir / ".gct-launcher.tmp"
    build_launcher(python, built)
    names = installable_programs()
    for name in names:
        tmp = bindir / f".{name}.tmp"
        shutil.copyfile(built, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, bindir / name)
    built.unlink()
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install_launchers", description=__doc__.split("\n\n")[0])
    parser.add_argument("bindir", type=Path, help="directory to install the programs into")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter the programs run with (default: this one)")
    args = parser.parse_args(argv)
    names = install(args.bindir, os.path.abspath(args.python))
    print(f"installed {len(names)} programs into {args.bindir}: {' '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
