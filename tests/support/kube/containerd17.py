"""Fetch containerd 1.7 (CDI support) from the next Debian release into the user's cache, without touching
the machine's apt configuration.

Debian 12 ships containerd 1.6, whose CRI drops the CDI devices a device plugin returns; trixie's 1.7 runs
on bookworm (it needs runc and libc6 >= 2.34). apt-get runs with a private sources.list naming the machine's
own Debian mirror (found in `apt-cache policy`, so it is whatever the machine uses) at CONTAINERD17_SUITE,
private list and cache directories, and downloads the .deb, which `dpkg-deb -x` unpacks into the cache.
Nothing is installed.

Run by tests.support.kube.setup (`make kube`).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.kube import paths
from tests.support.kube.setup_common import SetupError, cache_lock, say

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# `500 http://mirror/debian bookworm/main amd64 Packages`, then `release ...,o=Debian,...`
POLICY_LINE = re.compile(r"^\s*-?\d+\s+(\S+)\s+(\S+)/main\s+\S+\s+Packages\s*$")


def os_codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    found = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
    return found.group(1) if found else ""


def debian_mirror(policy_text: str, codename: str) -> str | None:
    """The base URI of the machine's Debian archive for its release's main component, from `apt-cache
    policy` (deb822 or one-line sources alike); None when the machine has no Debian source."""
    lines = policy_text.splitlines()
    for index, line in enumerate(lines):
        match = POLICY_LINE.match(line)
        if not match or match.group(2) != codename:
            continue
        release = lines[index + 1] if index + 1 < len(lines) else ""
        if "o=Debian" in release:
            return match.group(1)
    return None


def apt_options(private: Path) -> list[str]:
    """Options that make apt-get read and write only below private (and the machine's keyring)."""
    return ["-o", f"Dir::Etc::SourceList={private / 'sources.list'}",
            "-o", "Dir::Etc::SourceParts=" + str(private / "sources.list.d"),
            "-o", "Dir::Etc::PreferencesParts=" + str(private / "preferences.d"),
            "-o", f"Dir::Etc::Preferences={private / 'preferences'}",
            "-o", f"Dir::State::Lists={private / 'lists'}",
            "-o", f"Dir::Cache={private / 'cache'}",
            "-o", f"Dir::State::status={private / 'status'}",
            "-o", "APT::Sandbox::User=root",
            "-o", "Debug::NoLocking=1"]


def _apt(args: list[str], cwd: Path) -> None:
    proc = subprocess.run(["apt-get", "-q", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        raise SetupError(f"apt-get {args[-2] if args[-1] == 'containerd' else args[-1]} failed: "
                         f"{lines[-1] if lines else 'no output'}", f"{paths.CONTAINERD17_SUITE} main")


def fetch(dest: Path) -> None:
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise SetupError("containerd 1.7 comes from Debian's packages, and this machine has no apt-get", "PATH")
    policy = subprocess.run(["apt-cache", "policy"], capture_output=True, text=True, check=False).stdout
    mirror = debian_mirror(policy, os_codename())
    if mirror is None:
        raise SetupError("no Debian archive among the machine's apt sources (run apt-get update first?)",
                         "apt-cache policy")
    say(f"fetching containerd from Debian {paths.CONTAINERD17_SUITE} ({mirror}) into {dest}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="apt-", dir=dest.parent) as tmp:
        private = Path(tmp)
        for sub in ("sources.list.d", "preferences.d", "lists/partial", "cache/archives/partial", "debs"):
            (private / sub).mkdir(parents=True)
        (private / "status").write_text("")
        (private / "sources.list").write_text(
            f"deb [signed-by={KEYRING}] {mirror} {paths.CONTAINERD17_SUITE} main\n")
        options = apt_options(private)
        _apt([*options, "update"], private)
        _apt([*options, "download", "containerd"], private / "debs")
        debs = sorted((private / "debs").glob("containerd_*.deb"))
        if not debs:
            raise SetupError("apt-get download gave no containerd .deb", str(private / "debs"))
        unpacked = private / "root"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True)
        version = containerd_version(unpacked / "usr/bin/containerd")
        if not version.startswith("1.7"):
            raise SetupError(f"{paths.CONTAINERD17_SUITE}'s containerd is {version or 'unknown'}, not 1.7",
                             debs[0].name)
        if dest.exists():
            shutil.rmtree(dest)
        unpacked.rename(dest)
    say(f"containerd {version} unpacked")


def containerd_version(binary: Path) -> str:
    """`containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+b4` -> 1.7.24~ds1"""
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    fields = proc.stdout.split()
    return fields[2] if proc.returncode == 0 and len(fields) >= 3 else ""


def ensure_containerd17() -> Path:
    dest = paths.containerd17_root()
    with cache_lock("containerd"):
        if not (dest / "usr/bin/containerd").exists():
            fetch(dest)
    return dest
