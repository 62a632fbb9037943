"""The installed file tree of a package, staged under a directory: the Python environment, the
programs in /usr/bin, configuration, systemd units, the udev rule and the documentation.

deb and rpm differ only in where systemd, udev and the environment file live.
"""
from __future__ import annotations

import gzip
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from pkgtools import manpages
from pkgtools.errors import BuildError, run
from pkgtools.venv_build import PREFIX, Environment

CONFIG_FILE = "/etc/nvidia-container-runtime/config.toml"
DOC_DIR = "/usr/share/doc/gpu-container-toolkit"
CTK = "nvidia-ctk"
UNITS = ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path")   # enabled at installation
# The device plugin as a node service: shipped, never enabled by the package (a node runs it as this
# unit or as the DaemonSet of packaging/kubernetes/, the admin's choice); its config file is a conffile.
DEVICE_PLUGIN_UNIT = "nvidia-device-plugin.service"
DEVICE_PLUGIN_CONFIG = "/etc/nvidia-device-plugin/config.yaml"
UDEV_RULE = "71-nvidia-cdi-refresh.rules"
LIBEXEC = ("nvidia-cdi-refresh", "gct-package-setup", "gct-engine-undo")
PRESET = "50-gpu-container-toolkit.preset"
PACKAGE = "gpu-container-toolkit"
MAN_DIR = "/usr/share/man/man1"
# Completion files where bash-completion, zsh and fish look for them (zsh: per flavour).
BASH_COMPLETION_DIR = "/usr/share/bash-completion/completions"
FISH_COMPLETION_DIR = "/usr/share/fish/vendor_completions.d"


@dataclass(frozen=True)
class Flavour:
    name: str
    unit_dir: str
    udev_dir: str
    environment_file: str
    # rpm: a systemd preset that enables the units (%systemd_post applies presets); Debian enables
    # them with deb-systemd-helper instead
    preset_dir: str | None
    # zsh's directory for packages' completion functions (Debian's zsh reads vendor-completions,
    # Fedora's site-functions)
    zsh_completion_dir: str


# Debian bookworm packages still ship units and rules under /lib (the merged-/usr aliasing rules of dpkg).
DEB = Flavour("deb", "/lib/systemd/system", "/lib/udev/rules.d", "/etc/default/nvidia-cdi-refresh", None,
              "/usr/share/zsh/vendor-completions")
RPM = Flavour("rpm", "/usr/lib/systemd/system", "/usr/lib/udev/rules.d", "/etc/sysconfig/nvidia-cdi-refresh",
              "/usr/lib/systemd/system-preset", "/usr/share/zsh/site-functions")


@dataclass(frozen=True)
class Staged:
    root: Path
    flavour: Flavour
    conffiles: tuple[str, ...]
    programs: tuple[str, ...]  # the /usr/bin entries
    completions: tuple[str, ...]  # the programs with shell completion files


def render(template: Path, values: dict[str, str]) -> str:
    """template with every @KEY@ replaced; a placeholder without a value is a BuildError."""
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if left:
        raise BuildError(f"no value for {', '.join(left)}", str(template))
    return text


def substitutions(flavour: Flavour) -> dict[str, str]:
    return {"PREFIX": PREFIX, "ENVIRONMENT_FILE": flavour.environment_file, "UNITS": " ".join(UNITS),
            "DEVICE_PLUGIN_UNIT": DEVICE_PLUGIN_UNIT, "DEVICE_PLUGIN_CONFIG": DEVICE_PLUGIN_CONFIG}


def _write(root: Path, path: str, text: str | bytes, mode: int) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        target.write_text(text)
    else:
        target.write_bytes(text)
    os.chmod(target, mode)


def _is_program(path: Path) -> bool:
    """An ELF file or a script (#!): what may be executable. Some wheels mark every file executable
    (protobuf's .py modules), which lintian flags as executable-not-elf-or-script."""
    with open(path, "rb") as f:
        head = f.read(4)
    return head == b"\x7fELF" or head.startswith(b"#!")


def _normalise_modes(root: Path) -> None:
    """0755 for directories and executable programs, 0644 for everything else (umask and pip vary)."""
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        if stat.S_ISDIR(st.st_mode) or (st.st_mode & 0o111 and _is_program(path)):
            os.chmod(path, 0o755)
        else:
            os.chmod(path, 0o644)


def debian_changelog_gz(text: str) -> bytes:
    # mtime 0: the same changelog gives the same bytes (reproducible packages)
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def completion_files(flavour: Flavour, program: str) -> dict[str, str]:
    """shell -> where its completion file for program goes."""
    return {"bash": f"{BASH_COMPLETION_DIR}/{program}", "zsh": f"{flavour.zsh_completion_dir}/_{program}",
            "fish": f"{FISH_COMPLETION_DIR}/{program}.fish"}


def stage_manuals(dest: Path, flavour: Flavour, programs: tuple[str, ...], manuals: dict, version: str) -> None:
    """A manual page for every program in /usr/bin (made from its --help: pkgtools.manpages) and the
    completion files of the programs that have them."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    helps = manuals["help"]
    for program in programs:
        if program in manpages.ALIASES:
            link = dest / MAN_DIR.lstrip("/") / f"{program}.1.gz"
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f"{manpages.ALIASES[program]}.1.gz", link)
            continue
        if program not in manpages.SUMMARIES or (program not in helps and program not in manpages.NO_HELP):
            raise BuildError(f"no manual page for {program} (packaging/pkgtools/manpages.py)", f"/usr/bin/{program}")
        page = manpages.man_page(program, helps.get(program, []), version, epoch, PACKAGE)
        _write(dest, f"{MAN_DIR}/{program}.1.gz", manpages.gzipped(page), 0o644)
    for program, scripts in manuals["completion"].items():
        for shell, path in completion_files(flavour, program).items():
            _write(dest, path, scripts[shell], 0o644)


def stage(flavour: Flavour, env: Environment, packaging: Path, docs: Path, dest: Path, copyright_text: str,
          changelog_text: str, version: str) -> Staged:
    if dest.exists():
        raise BuildError("the staging directory exists already", str(dest))
    values = substitutions(flavour)
    prefix = dest / PREFIX.lstrip("/")
    prefix.parent.mkdir(parents=True)
    run(["cp", "-a", str(env.tree), str(prefix)], "copying the Python environment")
    for name in LIBEXEC:
        _write(dest, f"{PREFIX}/libexec/{name}", render(packaging / "libexec" / name, values), 0o755)

    programs = tuple(sorted({*env.programs, CTK}))
    bindir = dest / "usr/bin"
    bindir.mkdir(parents=True)
    for name in programs:
        if not (prefix / "bin" / name).exists():
            raise BuildError(f"the environment has no {name}", str(prefix / "bin"))
        # the launcher picks its program by the name /proc/self/exe resolves to: a symlink keeps it
        os.symlink(os.path.relpath(f"{PREFIX}/bin/{name}", "/usr/bin"), bindir / name)

    _write(dest, CONFIG_FILE, (packaging / "config" / "config.toml").read_text(), 0o644)
    _write(dest, flavour.environment_file, render(packaging / "default" / "nvidia-cdi-refresh", values), 0o644)
    _write(dest, DEVICE_PLUGIN_CONFIG, (packaging / "device-plugin" / "config.yaml").read_text(), 0o644)
    for unit in (*UNITS, DEVICE_PLUGIN_UNIT):
        _write(dest, f"{flavour.unit_dir}/{unit}", render(packaging / "systemd" / unit, values), 0o644)
    _write(dest, f"{flavour.udev_dir}/{UDEV_RULE}", render(packaging / "udev" / UDEV_RULE, values), 0o644)
    if flavour.preset_dir:
        _write(dest, f"{flavour.preset_dir}/{PRESET}", render(packaging / "systemd" / PRESET, values), 0o644)

    stage_manuals(dest, flavour, programs, env.manuals, version)

    _write(dest, f"{DOC_DIR}/copyright", copyright_text, 0o644)
    _write(dest, f"{DOC_DIR}/README.md", (docs.parent / "README.md").read_text(), 0o644)
    _write(dest, f"{DOC_DIR}/python-distributions.txt", "\n".join(env.distributions) + "\n", 0o644)
    for doc in ("packaging.md", "device-plugin.md"):
        _write(dest, f"{DOC_DIR}/{doc}", (docs / doc).read_text(), 0o644)
    if flavour is DEB:
        _write(dest, f"{DOC_DIR}/changelog.Debian.gz", debian_changelog_gz(changelog_text), 0o644)
        _write(dest, "/usr/share/lintian/overrides/gpu-container-toolkit",
               (packaging / "debian" / "lintian-overrides").read_text(), 0o644)
    _normalise_modes(dest)
    set_mtimes(dest)
    return Staged(dest, flavour, (CONFIG_FILE, flavour.environment_file, DEVICE_PLUGIN_CONFIG), programs,
                  tuple(sorted(env.manuals["completion"])))


def set_mtimes(root: Path) -> None:
    """Every mtime = $SOURCE_DATE_EPOCH (the changelog's date): the dates say which release, not when it was built."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return
    for path in [*root.rglob("*"), root]:
        os.utime(path, (int(epoch), int(epoch)), follow_symlinks=False)


def tree_size_kib(root: Path) -> int:
    """Installed-Size as dpkg counts it: KiB per file rounded up (hard links once), one per directory
    and symlink."""
    total, seen = 0, set()
    for path in root.rglob("*"):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += -(-st.st_size // 1024)
        else:
            total += 1
    return total


def copy_tree(src: Path, dest: Path) -> None:
    """A copy that keeps symlinks, modes and hard links."""
    run(["cp", "-a", str(src), str(dest)], "copying the staged tree")
