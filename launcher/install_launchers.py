"""Build the static launcher and install it as each program.

    python -m launcher.install_launchers BINDIR

Run with the interpreter the programs should use (the venv's, or the system package's). It bakes
that interpreter's path and the import path of this installation into the binary, so the launched
program needs nothing from the environment, and the toolkit's version (cdi.version) for --version.
Each program is a copy of the binary named after it
(the launcher picks the program by its own file name). nvidia-cdi-hook is C (cdi_hook/), linked
into the same binary with the C the programs share (c_common/) and the C helper's sources
(libcontainer_c/src/): it needs no interpreter at all. gct-nvml-inventory (nvml_inventory/,
cdi.nvml.NVML_INVENTORY_PROGRAM), a program of its own and dynamically linked, as it must dlopen NVML,
which the static launcher cannot, is an internal helper: it goes into BINDIR/../libexec
(cdi.nvml.libexec_dir), off PATH, where every caller looks for it.

The wheel carries the launcher too (setup.py calls build_wheel_scripts): built without a baked
interpreter, it reads the one pip installed it for from INTERPRETER_FILE beside it, so
`pip install` puts every program on PATH (and gct-nvml-inventory, the wheel's data, into the
environment's libexec/) and `pip uninstall` removes them. `make venv` and the
system packages still run this module, for the fixed import path.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
TOP_DIR = PACKAGE_DIR.parent   # the checkout, or site-packages: every C program's folder is beside this one
LAUNCHER_SOURCE = PACKAGE_DIR / "launcher.c"
# The launcher's translation units: its own (this folder), the native program linked into it
# (nvidia-cdi-hook), the C they share, and the C helper the hook uses.
NATIVE_SOURCE_DIRS = (PACKAGE_DIR, TOP_DIR / "cdi_hook", TOP_DIR / "c_common", TOP_DIR / "libcontainer_c" / "src")

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
    "nvidia-ctk": "ctk.main",
    "nvidia-device-plugin": "device_plugin.main",
    "gct-launcher-probe": "launcher.launcher_probe",
    "gct-launcher-probe-ctk": "launcher.launcher_probe",
}
TEST_ONLY_PROGRAMS = ("gct-launcher-probe", "gct-launcher-probe-ctk")
# The NVML transcript reader the launcher runs (installed under cdi.nvml.NVML_INVENTORY_PROGRAM); the
# NVML declarations it #includes are the binding's, cdi/nvml_abi.h.
NVML_INVENTORY_SOURCE = TOP_DIR / "nvml_inventory" / "nvml_inventory.c"
NVML_ABI_DIR = TOP_DIR / "cdi"

# Beside a launcher built for the wheel: its first line, "#!python" in the wheel, is rewritten by the
# installer to the interpreter it installs for (PEP 427). The name is launcher.c's INTERPRETER_FILE.
INTERPRETER_FILE = ".gpu-container-toolkit-python"
# How a launcher built for the wheel finds its import path when it starts: the site-packages of its
# interpreter's venv, or of the interpreter (site is imported, not run: no .pth file is read). Under
# -S nothing has read pyvenv.cfg yet, so the venv's prefix is set here as site.py would set it.
WHEEL_SYS_PATH = """import os, site
venv = os.path.dirname(os.path.dirname(sys.executable))
if os.path.isfile(os.path.join(venv, 'pyvenv.cfg')):
    sys.prefix = sys.exec_prefix = venv
    site.PREFIXES[:] = [venv]
sys.path[:0] = site.getsitepackages()"""


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
    paths = [str(TOP_DIR)]
    scheme = sysconfig.get_paths()
    for key in ("purelib", "platlib"):
        paths.append(scheme[key])
    seen: list[str] = []
    for p in paths:
        if p not in seen:
            seen.append(p)
    return seen


@contextlib.contextmanager
def toolkit_importable():
    """This installation's packages importable for the block: setup.py loads this file by its path,
    where they may not be importable yet."""
    sys.path.insert(0, str(TOP_DIR))
    try:
        yield
    finally:
        sys.path.pop(0)


def toolkit_module(name: str):
    """A module of this installation's packages, e.g. cdi.version."""
    with toolkit_importable():
        return importlib.import_module(name)


def toolkit_version() -> tuple[str, str]:
    """(name, version) of the toolkit, from the one source cdi.version reads."""
    version = toolkit_module("cdi.version")
    return version.DISTRIBUTION, version.toolkit_version()


def nvml_inventory_program() -> str:
    return toolkit_module("cdi.nvml").NVML_INVENTORY_PROGRAM


def libexec_dir(bindir: Path) -> Path:
    """Where gct-nvml-inventory goes for the programs in bindir (cdi.nvml.libexec_dir: <prefix>/libexec)."""
    return Path(toolkit_module("cdi.nvml").libexec_dir(str(bindir)))


def compile_program(cmd: list[str], what: str) -> None:
    """Runs the compiler command; its failure ends the install with the command and the compiler's
    output."""
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"install_launchers: error: compiling {what} failed ({' '.join(cmd)}):\n{result.stderr}")


def build_launcher(python: str | None, out: Path, cc: str = "cc", strip: bool = False,
                   version: str | None = None) -> None:
    """The launcher for interpreter python and this installation's import path; python None: the
    wheel's, which finds both when it starts. strip: without symbols (the wheel's copies). version:
    the toolkit's, when it is not installed yet (the wheel's build)."""
    name, installed_version = toolkit_version()
    version = version or installed_version
    sys_path = WHEEL_SYS_PATH if python is None else f"sys.path[:0] = {import_path()!r}"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp, "launcher_config.h")
        config.write_text(
            "/* written by launcher/install_launchers.py */\n"
            f"#define GCT_PYTHON {c_string(python or '')}\n"
            f"#define GCT_SYS_PATH_CODE {c_string(sys_path)}\n"  # Python code that sets sys.path
            f"#define GCT_TOOLKIT_NAME {c_string(name)}\n"
            f"#define GCT_TOOLKIT_VERSION {c_string(version)}\n"
        )
        sources = [str(p) for d in NATIVE_SOURCE_DIRS for p in sorted(d.glob("*.c"))]
        # unused C helper functions (the cffi module's) are dropped: --gc-sections
        cmd = [cc, "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
               "-ffunction-sections", "-fdata-sections", "-Wl,--gc-sections", *(["-s"] if strip else []), f"-I{tmp}",
               *(f"-I{d}" for d in NATIVE_SOURCE_DIRS), *sources, "-o", str(out)]
        compile_program(cmd, "the launcher")


def build_nvml_inventory(out: Path, cc: str = "cc", strip: bool = False, version: str | None = None) -> None:
    """gct-nvml-inventory: dynamically linked (dlopen), with -ldl for a glibc before 2.34; version (for
    --version): the toolkit's, when it is not installed yet (the wheel's build)."""
    version = version or toolkit_version()[1]
    cmd = [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", *(["-s"] if strip else []),
           f"-DGCT_TOOLKIT_VERSION={c_string(version)}",
           f"-I{NVML_ABI_DIR}", str(NVML_INVENTORY_SOURCE), "-o", str(out), "-ldl"]
    compile_program(cmd, out.name)


def installable_programs() -> list[str]:
    with toolkit_importable():
        return [name for name, module in PROGRAMS.items() if module is None or importlib.util.find_spec(module)]


def place(source: Path, folder: Path, name: str) -> None:
    """A copy of source as folder/name, mode 0755: written under a fresh name in folder, created
    exclusively (O_CREAT | O_EXCL: a file or a symlink planted there, or another install's temp file,
    is never opened), and renamed over name. The temp file is removed on any failure."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as data:
            shutil.copyfileobj(data, out)
            os.fchmod(out.fileno(), 0o755)
        os.replace(tmp, folder / name)
    except BaseException:
        os.unlink(tmp)
        raise


def _build_and_place(folder: Path, names: list[str], helper_folder: Path, python: str | None, cc: str = "cc",
                     strip: bool = False, version: str | None = None) -> list[str]:
    """The launcher (build_launcher's python, cc, strip, version) under each of names in folder, and
    gct-nvml-inventory in helper_folder: both built in a private temporary directory, then placed (see
    place). The launchers' names."""
    folder.mkdir(parents=True, exist_ok=True)
    helper_folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gct-launchers-") as build:
        launcher, inventory = Path(build, "launcher"), Path(build, nvml_inventory_program())
        build_launcher(python, launcher, cc, strip=strip, version=version)
        build_nvml_inventory(inventory, cc, strip=strip, version=version)
        for name in names:
            place(launcher, folder, name)
        place(inventory, helper_folder, inventory.name)
    return list(names)


def install(bindir: Path, python: str) -> list[str]:
    """Every program into bindir (the launcher under each name), gct-nvml-inventory into
    libexec_dir(bindir); the programs' names."""
    return _build_and_place(bindir, installable_programs(), libexec_dir(bindir), python)


def build_wheel_scripts(scripts_dir: Path, helper_folder: Path, version: str, cc: str = "cc") -> list[str]:
    """The launcher, built without an interpreter, under each program's name into the wheel's scripts
    (every program but the tests' probe), and gct-nvml-inventory into helper_folder (setup.py makes it
    the wheel's data for libexec/); version: the one being built. INTERPRETER_FILE comes from setup.py's
    scripts."""
    return _build_and_place(scripts_dir, [name for name in PROGRAMS if name not in TEST_ONLY_PROGRAMS],
                            helper_folder, None, cc, strip=True, version=version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install_launchers", description=__doc__.split("\n\n")[0])
    parser.add_argument("bindir", type=Path, help="directory to install the programs into")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter the programs run with (default: this one)")
    args = parser.parse_args(argv)
    names = install(args.bindir, os.path.abspath(args.python))
    print(f"installed {len(names)} programs into {args.bindir}: {' '.join(names)}")
    print(f"installed {nvml_inventory_program()} into {libexec_dir(args.bindir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
