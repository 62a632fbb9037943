"""A private mount namespace in which a test's Kubernetes node runs, so nothing of the machine changes.

The kubelet writes to fixed places (/var/lib/kubelet/device-plugins/, /var/lib/kubelet/plugins_registry/,
/var/log/pods, ...), so the namespace gets a tmpfs on /run and overlays on /etc and /var whose upper layers
live in the test's work dir: inside, those trees look like the machine's and are writable; the machine's
stay as they were. /etc/hosts inside also names the node on 127.0.0.1 (the API server reaches the kubelet
by the node's host name: a kubelet refuses a loopback node IP). /tmp, /sys and /proc are the machine's (the work dir, cgroups).

A holder process (this module run as a program under `unshare --mount`) makes the mounts and keeps the
namespace alive until its stdin closes; `MountNamespace` starts it, runs programs inside it with
`nsenter`, and reaches its files from outside through /proc/<holder>/root (unix sockets too).
"""
from __future__ import annotations

import errno
import os
import select
import subprocess
import sys
from pathlib import Path, PurePosixPath

from tests.support.mountns import bind_mount

REPO = Path(__file__).resolve().parents[3]
OVERLAID = ("/etc", "/var")
READY = "ready"


def _mount(*args: str) -> None:
    subprocess.run(["mount", "-n", *args], check=True, capture_output=True)


def _mount_points_below(directory: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    return sorted({p for p in points if p.startswith(directory + "/")}, key=len)


def _overlay(directory: str, layers: Path) -> None:
    """An overlay on directory whose writes go below layers; mounts below directory (a container's bind-mounted
    /etc/resolv.conf, a /var/lib of its own) are put back on top of it, each directory among them with an overlay
    of its own: they are seen as on the machine, and nothing written there reaches it."""
    kept = [(point, os.open(point, os.O_PATH)) for point in _mount_points_below(directory)]
    _overlay_one(directory, layers)
    for point, fd in kept:      # outermost first: an inner one goes on top of the outer one's overlay
        if os.path.lexists(point):
            bind_mount(f"/proc/self/fd/{fd}", point)
            if os.path.isdir(point):
                _overlay_one(point, layers)
        os.close(fd)


def _overlay_one(directory: str, layers: Path) -> None:
    name = directory.strip("/").replace("/", "-")
    upper, work = layers / f"{name}-upper", layers / f"{name}-work"
    upper.mkdir(parents=True)
    work.mkdir()
    _mount("-t", "overlay", "overlay", "-o", f"lowerdir={directory},upperdir={upper},workdir={work}", directory)


def _hosts_file(layers: Path, names: list[str]) -> None:
    """/etc/hosts with names on 127.0.0.1 added, a file of the namespace's own bind-mounted on it (the
    machine's may be a mount of its own, which the overlay keeps: writing to it would write to the machine's)."""
    hosts = layers / "hosts"
    with open("/etc/hosts") as machine:
        hosts.write_text(machine.read().rstrip("\n") + "\n" + "".join(f"127.0.0.1 {n}\n" for n in names))
    _mount("--bind", str(hosts), "/etc/hosts")


def holder_main(layers: str, *names: str) -> int:
    """Run in a fresh mount namespace (unshare --mount --propagation private): make the mounts, say READY,
    then wait for stdin to close. names: host names that resolve to 127.0.0.1 inside."""
    _mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
    for directory in OVERLAID:
        _overlay(directory, Path(layers))
    if names:
        _hosts_file(Path(layers), list(names))
    print(READY, flush=True)
    sys.stdin.read()
    return 0


class MountNamespace:
    """The holder and ways to use its namespace. Start with start(), end with stop()."""

    def __init__(self, layers: Path, loopback_names: tuple[str, ...] = ()):
        self.layers = layers
        self.loopback_names = loopback_names  # host names that resolve to 127.0.0.1 inside (/etc/hosts)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "MountNamespace":
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "tests.support.kube.namespace",
             str(self.layers), *self.loopback_names], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        if line != READY:
            self.proc.stdin.close()
            why = self.proc.stderr.read().strip() if ready or self.proc.poll() is not None else ""
            self.stop()
            raise RuntimeError(f"the mount namespace was not set up: {why or line}")
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def argv(self, command: list[str], cwd: str | Path | None = None) -> list[str]:
        """command run inside the namespace (cwd: this process's, which must exist there too)."""
        return ["nsenter", f"--mount=/proc/{self.pid}/ns/mnt", f"--wd={cwd or os.getcwd()}", "--", *command]

    def run(self, command: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(command, kwargs.pop("cwd", None)), **kwargs)

    def popen(self, command: list[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.argv(command, kwargs.pop("cwd", None)), **kwargs)

    def path(self, inside: str | Path) -> Path:
        """The path by which this process reaches a file of the namespace (also a unix socket's).

        Symlinks are resolved here, inside the namespace's root: the kernel would resolve an absolute link
        met below /proc/<pid>/root (/var/run -> /run) against this process's root, the machine's."""
        root = Path(f"/proc/{self.pid}/root")
        todo = list(PurePosixPath("/", inside).parts[1:])
        done: list[str] = []
        links = 0
        while todo:
            part = todo.pop(0)
            if part in (".", ""):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            here = root.joinpath(*done, part)
            if not here.is_symlink():
                done.append(part)
                continue
            links += 1
            if links > 40:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", str(inside))
            target = PurePosixPath(os.readlink(here))
            if target.is_absolute():
                done = []
                todo = list(target.parts[1:]) + todo
            else:
                todo = list(target.parts) + todo
        return root.joinpath(*done)

    def stop(self) -> None:
        """End the holder; the namespace and its mounts go with the last process in it."""
        if self.proc is None:
            return
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(holder_main(*sys.argv[1:]))
