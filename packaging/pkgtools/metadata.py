"""Package metadata computed from the sources and the staged files: the description, the changelog
in both formats, and the shared-library dependencies of the compiled parts."""
from __future__ import annotations

import ast
import email.utils
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pkgtools.errors import BuildError, run

SUMMARY = "run containers with NVIDIA GPUs (drop-in NVIDIA Container Toolkit)"
DESCRIPTION = [
    "Runs containers with NVIDIA GPUs under Docker, containerd, CRI-O and podman: the OCI runtime "
    "shim nvidia-container-runtime, the prestart hook nvidia-container-runtime-hook, "
    "nvidia-container-cli, the CDI hook nvidia-cdi-hook and the admin CLI nvidia-ctk, with the "
    "program names, options, environment variables and config keys of the NVIDIA Container Toolkit.",
    "The programs run from a self-contained Python environment in /usr/lib/gpu-container-toolkit, "
    "built on the distribution's python3, so the host's own Python packages are untouched. The "
    "nvidia-cdi-refresh service keeps the CDI spec /var/run/cdi/nvidia.yaml in step with the NVIDIA "
    "driver.",
]
# The low-level runtimes the shim execs (config [nvidia-container-runtime] runtimes).
RUNTIMES = ("runc", "crun")


def nvidia_release(version_py: Path = Path(__file__).resolve().parents[2] / "cdi" / "version.py") -> str:
    """NVIDIA_RELEASE of cdi/version.py, the one place that names the NVIDIA release these programs
    follow. Read from the source, not imported: the build runs on the distribution's python3, outside
    the toolkit's environment."""
    for node in ast.parse(version_py.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["NVIDIA_RELEASE"]:
            return ast.literal_eval(node.value)
    raise BuildError(f"no NVIDIA_RELEASE in {version_py}")


# The release of NVIDIA's packages whose programs, options, config keys and CDI output these follow,
# in NVIDIA's own version format (Debian revision 1).
NVIDIA_VERSION = f"{nvidia_release()}-1"
# NVIDIA's packages that ship the same program names as this one, which replaces them whole:
# Conflicts + Replaces (one of them at a time, installing either removes the other, both ways) and
# Provides at NVIDIA_VERSION, so that what depends on them, e.g. nvidia-docker2's
# `nvidia-container-toolkit (>= 1.x)`, is satisfied and stays installed.
PROVIDED = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools")
# Older package names of the same programs, replaced without being provided.
REPLACED = (*PROVIDED, "nvidia-container-runtime-hook")
# nvidia-container-runtime up to 3.5.0-1 shipped the runtime program; later versions are a meta package
# depending on nvidia-container-toolkit (nvidia-docker2 may depend on it), which stays installed:
# only the old ones are in the way (Breaks + Replaces, as NVIDIA's own toolkit declares).
OLD_RUNTIME_PACKAGE = ("nvidia-container-runtime", "<=", "3.5.0-1")


# --- changelog ------------------------------------------------------------------------------------

@dataclass
class ChangelogEntry:
    package: str
    version: str
    distribution: str
    urgency: str
    changes: list[str] = field(default_factory=list)  # one string per "*" item, lines joined
    maintainer: str = ""
    date: str = ""  # RFC 2822


_HEADER = re.compile(r"^(?P<package>[a-z0-9][a-z0-9+.-]+) \((?P<version>[^()\s]+)\) (?P<dist>[^;]+); "
                     r"urgency=(?P<urgency>\w+)\s*$")
_TRAILER = re.compile(r"^ -- (?P<maintainer>.+?)  (?P<date>\S.*)$")


def parse_changelog(text: str, source: str = "changelog") -> list[ChangelogEntry]:
    """Entries of a Debian-format changelog, newest first; malformed lines are a BuildError."""
    entries: list[ChangelogEntry] = []
    current: ChangelogEntry | None = None
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{source}:{number}"
        if not line.strip():
            continue
        if header := _HEADER.match(line):
            if current is not None:
                raise BuildError("a changelog entry without its ' -- maintainer  date' line", where)
            current = ChangelogEntry(header["package"], header["version"], header["dist"], header["urgency"])
        elif current is None:
            raise BuildError("expected a 'package (version) distribution; urgency=...' line", where)
        elif line.startswith("  * "):
            current.changes.append(line[4:].strip())
        elif line.startswith("    ") and current.changes:
            current.changes[-1] += " " + line.strip()
        elif trailer := _TRAILER.match(line):
            if email.utils.parsedate_to_datetime(trailer["date"]) is None:
                raise BuildError(f"bad date {trailer['date']!r}", where)
            current.maintainer, current.date = trailer["maintainer"], trailer["date"]
            if not current.changes:
                raise BuildError("a changelog entry without changes", where)
            entries.append(current)
            current = None
        else:
            raise BuildError(f"unexpected changelog line {line.strip()[:40]!r}", where)
    if current is not None:
        raise BuildError("the last changelog entry has no ' -- maintainer  date' line", source)
    if not entries:
        raise BuildError("the changelog is empty", source)
    return entries


def rpm_changelog(entries: list[ChangelogEntry]) -> str:
    """The same entries as an rpm %changelog."""
    out = []
    for entry in entries:
        when = email.utils.parsedate_to_datetime(entry.date).strftime("%a %b %d %Y")
        out.append(f"* {when} {entry.maintainer} - {entry.version}")
        out.extend(f"- {change.replace('%', '%%')}" for change in entry.changes)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# --- shared libraries -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ElfInfo:
    needed: tuple[str, ...]
    runpath: tuple[str, ...]  # RPATH and RUNPATH entries


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def elf_info(path: Path) -> ElfInfo:
    done = run(["objdump", "-p", str(path)], "reading an ELF dynamic section")
    needed, runpath = [], []
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "NEEDED":
            needed.append(parts[1])
        elif len(parts) == 2 and parts[0] in ("RPATH", "RUNPATH"):
            runpath.extend(parts[1].split(":"))
    return ElfInfo(tuple(needed), tuple(runpath))


def elf_files(tree: Path) -> list[Path]:
    return sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p))


def external_sonames(tree: Path) -> dict[str, list[Path]]:
    """Shared libraries the ELF files of tree need that tree does not hold itself -> who needs them."""
    provided = {p.name for p in tree.rglob("*.so*")}
    needed: dict[str, list[Path]] = {}
    for path in elf_files(tree):
        for soname in elf_info(path).needed:
            if soname not in provided:
                needed.setdefault(soname, []).append(path)
    return needed


def _ldconfig_paths() -> dict[str, str]:
    done = run(["/sbin/ldconfig", "-p"], "listing the shared libraries of the build host")
    paths: dict[str, str] = {}
    for line in done.stdout.splitlines()[1:]:
        m = re.match(r"\s*(\S+) \((.*)\) => (\S+)", line)
        if m and "x86-64" in m[2]:
            paths.setdefault(m[1], m[3])
    return paths


def _owning_package(path: str) -> str | None:
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/lib/"):
            candidates.append("/usr" + p)
        elif p.startswith("/usr/lib/"):
            candidates.append(p[4:])
    for candidate in candidates:
        done = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.split(":", 1)[0].strip()
    return None


def _upstream_version(package: str) -> str:
    done = run(["dpkg-query", "-W", "-f=${Version}", package], f"asking dpkg the version of {package}")
    version = done.stdout.strip()
    return version.rsplit("-", 1)[0] if "-" in version else version


def debian_library_dependencies(sonames: list[str]) -> list[str]:
    """'package (>= upstream version on the build host)' for the packages holding these sonames."""
    paths = _ldconfig_paths()
    packages: set[str] = set()
    for soname in sonames:
        path = paths.get(soname)
        package = _owning_package(path) if path else None
        if package is None:
            raise BuildError(f"no installed package provides {soname}, which the Python environment needs", soname)
        packages.add(package)
    return [f"{p} (>= {_upstream_version(p)})" for p in sorted(packages)]


ELFDEPS = "/usr/lib/rpm/elfdeps"


def rpm_library_dependencies(tree: Path) -> list[str]:
    """What rpm's own ELF dependency generator (elfdeps, from the rpm package that rpmbuild comes
    with) requires for the ELF files of tree, less the libraries tree holds itself: the sonames as
    rpm names them (libcap.so.2()(64bit)) and the symbol versions they must define
    (libc.so.6(GLIBC_2.36)(64bit)), so an rpm database with an older glibc refuses the package."""
    if not os.access(ELFDEPS, os.X_OK):
        raise BuildError("rpm's ELF dependency generator is missing (apt-get install rpm)", ELFDEPS)
    provided = {p.name for p in tree.rglob("*.so*")}
    files = "".join(f"{p}\n" for p in elf_files(tree))
    done = run([ELFDEPS, "--requires"], "listing the ELF dependencies with rpm's elfdeps", input=files)
    requires = set()
    for line in done.stdout.split():
        if line.split("(", 1)[0] not in provided:
            requires.add(line)
    return sorted(requires)
