"""What a test run leaves on the machine: orphaned processes, mounts, cgroups and files in the places
runtimes and engines write to. `take()` records them; `new_since(before, after)` says what appeared.

Other people may use the machine at the same time, so only what names a path of this run (its pytest
base temp dir) is certainly ours; everything else that appeared is reported, not judged. Except at
FIXED_PLACES, where daemons, runtimes and pytest write whatever their flags (a test gives each a place
of its own instead), and for cgroups of FIXED_CGROUP_NAMES: a path that appears there fails the run
when no other such work was seen on the machine meanwhile (`other_work`), and is reported otherwise.
In the dirs of STAMPED_DIRS a file written again counts as well (`<path> (written again)`): the
caches there have fixed names, so a write over one an earlier run left would not show as a new name.
`take_files()` is the cheap part (the files alone), for a look before and after each test: which test
wrote is what one needs to fix it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# where runtimes, engines and CDI keep state outside a test's own dirs (/var/run is /run)
WATCHED_DIRS = ("/run/cdi", "/var/run/cdi", "/etc/cdi", "/run/runc", "/run/crun", "/run/containerd", "/run/docker",
                "/run/containers", "/run/libpod", "/run/nvidia-container-toolkit", "/run/nvidia",
                "/etc/nvidia-container-runtime", "/etc/docker", "/etc/containerd", "/tmp")
# the watched dirs whose entries' mtimes are compared too: the programs' default cache dir (fixed cache
# names), the CDI spec dirs, the MPS root's parent and the configs nvidia-ctk edits by default
STAMPED_DIRS = ("/run/nvidia-container-toolkit", "/run/cdi", "/etc/cdi", "/run/nvidia",
                "/etc/nvidia-container-runtime", "/etc/docker", "/etc/containerd")
# places where nothing of a test run may appear: dockerd's /run/docker/plugins, containerd 1.6's
# /run/containerd/{s,fifo,runc} and /tmp/containerd.<pid>.stacks.log (in TMPDIR), pytest's own
# /tmp/pytest-of-<user>, the system's CDI spec dirs, the programs' default cache dir, MPS root
# (/run/nvidia/mps) and config, and the engine configs nvidia-ctk runtime configure edits by default
FIXED_PLACES = ("/run/docker/", "/run/containerd/", "/run/cdi/", "/var/run/cdi/", "/etc/cdi/",
                "/run/nvidia-container-toolkit/", "/run/nvidia/", "/etc/nvidia-container-runtime/",
                "/etc/docker/", "/etc/containerd/", "/tmp/containerd.", "/tmp/pytest-of-")
# cgroups that are fixed places too: LXC moves a stopping container's monitor to `lxc.pivot` (at the
# top of each hierarchy unless the config names another parent) and never removes it
FIXED_CGROUP_NAMES = ("lxc.pivot",)
# processes that are such work: another test run, an engine, a benchmark or the demo, LXC
OTHER_WORK_WORDS = ("pytest", "dockerd", "containerd", "podman", "-m bench", "demo.py", "lxc-start", "lxc-execute",
                    "[lxc monitor]")
# an orphaned process is reported when its command line has one of these (what tests start)
RUNTIME_WORDS = ("runc", "crun", "conmon", "containerd", "dockerd", "docker-proxy", "podman", "catatonit", "sleep",
                 "unshare", "nsenter", "nvidia", "gct-", "pytest")
# this machine's own session manager, not the tests: its cgroups and files come and go all the time
MACHINE_OWN = ("/process_api/", "/tmp/bash_tool_", "/tmp/bash_jobs")


@dataclass
class Snapshot:
    processes: dict[int, tuple[int, str]] = field(default_factory=dict)  # pid -> (ppid, command line)
    mounts: set[str] = field(default_factory=set)
    cgroups: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    stamps: dict[str, int] = field(default_factory=dict)  # entry of STAMPED_DIRS -> its mtime (ns)


def _processes() -> dict[int, tuple[int, str]]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if not cmdline:  # kernel threads and zombies
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        if command.endswith("runc init"):  # says nothing of its container: its state dir does
            command += _runc_state_dir(entry)
        found[int(entry)] = (ppid, command)
    return found


def _runc_state_dir(pid: str) -> str:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    for variable in environ:
        if variable.startswith(b"_LIBCONTAINER_STATEDIR="):
            return f" (state {variable.split(b'=', 1)[1].decode(errors='replace')})"
    return ""


def _mounts() -> set[str]:
    """Mount point, root and source of each mount (ids and options change; the place does not)."""
    with open("/proc/self/mountinfo") as f:
        lines = [line.split() for line in f]
    return {f"{fields[4]} (root {fields[3]}, {fields[fields.index('-') + 1]} {fields[fields.index('-') + 2]})"
            for fields in lines}


def _cgroups() -> set[str]:
    """Cgroup dirs up to two levels below each hierarchy (runc's /<id>, docker/<id>, libpod_parent/<id>)."""
    found = set()
    for hierarchy in _subdirs(str(CGROUP_ROOT)):
        for top in _subdirs(hierarchy):
            found.add(top)
            found.update(_subdirs(top))
    return found


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _files() -> set[str]:
    """The entries of each of WATCHED_DIRS, and each of these dirs itself (`/run/docker/`) when it is there."""
    found = set()
    for d in WATCHED_DIRS:
        try:
            found.update(os.path.join(d, name) for name in os.listdir(d))
        except OSError:
            continue
        found.add(d + "/")
    return found


def _stamps() -> dict[str, int]:
    found = {}
    for d in STAMPED_DIRS:
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    try:
                        found[e.path] = e.stat(follow_symlinks=False).st_mtime_ns
                    except OSError:
                        continue
        except OSError:
            continue
    return found


def take() -> Snapshot:
    return Snapshot(_processes(), _mounts(), _cgroups(), _files(), _stamps())


def take_files() -> Snapshot:
    """The files alone (a few directory listings): cheap enough for a look around every test."""
    return Snapshot(files=_files(), stamps=_stamps())


def new_since(before: Snapshot, after: Snapshot, own_pid: int) -> dict[str, list[str]]:
    """What `after` has that `before` did not: processes of the kinds tests start left to init (orphans)
    or to a subreaper, mounts, cgroups and files in WATCHED_DIRS (new, or written again in STAMPED_DIRS)."""
    processes = [f"pid {pid}: {cmd}" for pid, (ppid, cmd) in sorted(after.processes.items())
                 if pid not in before.processes and pid != own_pid and (ppid == 1 or ppid not in after.processes)
                 and any(word in cmd for word in RUNTIME_WORDS)]
    written_again = {f"{path} (written again)" for path, mtime in after.stamps.items()
                     if path in before.stamps and before.stamps[path] != mtime}
    return {"processes": processes,
            "mounts": sorted(after.mounts - before.mounts),
            "cgroups": sorted(c for c in after.cgroups - before.cgroups if not _machine_own(c)),
            "files": sorted(f for f in (after.files - before.files) | written_again if not _machine_own(f))}


def _machine_own(path: str) -> bool:
    return any(part in path for part in MACHINE_OWN)


def certainly_ours(found: dict[str, list[str]], markers: list[str]) -> dict[str, list[str]]:
    """The part of `found` that names one of markers (paths only this run uses)."""
    return {kind: [item for item in items if any(m in item for m in markers)] for kind, items in found.items()}


def at_fixed_places(found: dict[str, list[str]]) -> list[str]:
    """The files of `found` at FIXED_PLACES."""
    return [f for f in found["files"] if f.startswith(FIXED_PLACES)]


def at_fixed_cgroups(found: dict[str, list[str]]) -> list[str]:
    """The cgroups of `found` named as one of FIXED_CGROUP_NAMES (at any of the two levels looked at)."""
    return [c for c in found["cgroups"] if os.path.basename(c) in FIXED_CGROUP_NAMES]


def other_work(snapshot: Snapshot, own_pid: int) -> set[str]:
    """Command lines of processes in snapshot that are other work on the machine: of OTHER_WORK_WORDS,
    neither started by own_pid (its children's children included) nor one of those that started it
    (`make test`, `timeout ... pytest`)."""
    def line_up(pid: int) -> list[int]:
        chain = []
        while pid in snapshot.processes and pid not in chain:
            chain.append(pid)
            pid = snapshot.processes[pid][0]
        return chain

    ancestors = set(line_up(own_pid))
    return {cmd for pid, (_ppid, cmd) in snapshot.processes.items()
            if any(word in cmd for word in OTHER_WORK_WORDS) and pid not in ancestors and own_pid not in line_up(pid)}


def describe(found: dict[str, list[str]], written_during: dict[str, str] | None = None) -> list[str]:
    """One line per item; a file at a fixed place names the test during which it appeared (written_during:
    item -> test id), when one did."""
    during = written_during or {}
    return [f"  {kind}: {item}" + (f" (during {during[item]})" if item in during else "")
            for kind, items in found.items() for item in items]
