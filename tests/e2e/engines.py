"""Private container engines for e2e tests: a dockerd or containerd that is a guest on the machine.

Each daemon gets its own socket, root, state/exec-root and pid file under a short temp dir (unix
socket paths must stay under 108 bytes), runs in its own session so it can be stopped as a process
group, and is stopped at the end of the test with everything it left: processes still naming its
dirs (containerd shims re-parent and leave the group), mounts under its dirs, then the dirs.

What the daemons write at fixed paths stays theirs too: each runs in its own mount namespace with an
empty /run (tests.support.mountns.private_run; dockerd makes /run/docker/plugins whatever its
flags, containerd 1.6 puts its shims' sockets in /run/containerd/s, its runc shim uses
/run/containerd/runc, ctr its FIFOs in /run/containerd/fifo: run ctr with `daemon.enter(...)`), and
with TMPDIR in its dir (containerd writes containerd.<pid>.stacks.log there on SIGUSR1, which
dockerd sends before it kills a containerd that stopped answering). dockerd's namespace has an empty
/etc/docker of its own too: dockerd 20.10 writes its identity key /etc/docker/key.json when there is
none there, whatever its flags (the daemon.json key "deprecated-key-path" would move it, but a test's
daemon.json is what that test checks, so it stays as the test wrote it).

Use the fixtures (`private_dockerd`, `private_containerd`, `private_podman`): each yields a factory that
starts an engine with the config you give it and stops everything it started when the test ends.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.rootfs import make_rootfs, rootfs_tar
from tests.support.cgroups import remove_cgroup_everywhere
from tests.support.mountns import (cover_with_tmpfs, in_namespace, namespace_holder, own_dir_at, private_run,
                                   stop_holder)

DOCKER_CLIENT = "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else (shutil.which("docker") or "docker")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    workdir: Path
    socket: Path
    log: Path
    owned_dirs: list[Path] = field(default_factory=list)
    cgroup_parent: str | None = None  # its containers' parent cgroup, removed when it stops

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def enter(self, argv: list[str]) -> list[str]:
        """argv run in the daemon's mount namespace (its /run: a ctr whose FIFOs the shims must open)."""
        return ["nsenter", f"--target={self.proc.pid}", "--mount", "--", *argv]

    def mountinfo(self) -> str:
        """The daemon's mount table: where its shims, runtimes and hooks mount."""
        return Path(f"/proc/{self.proc.pid}/mountinfo").read_text()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def short_tempdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def _wait_for(check, daemon: Daemon, what: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.proc.poll() is not None:
            raise RuntimeError(f"{daemon.name} exited with {daemon.proc.returncode} before {what}:\n"
                               f"{daemon.log_tail()}")
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{daemon.name} not ready after {timeout}s ({what}):\n{daemon.log_tail()}")


def daemon_tmpdir(workdir: Path) -> Path:
    """The TMPDIR of a daemon (and so of all it starts), removed with its workdir."""
    tmp = workdir / "tmp"
    tmp.mkdir(exist_ok=True)
    return tmp


def private_run_and_etc_docker() -> None:
    """A preexec_fn for dockerd: private_run(), and an empty /etc/docker of the namespace's own (made
    there only, also where the machine has no /etc/docker), where dockerd writes key.json."""
    private_run()
    own_dir_at("/etc/docker", "gct-private-etc-docker")


def _spawn(name: str, argv: list[str], workdir: Path, socket: Path, owned: list[Path],
           env: dict[str, str] | None = None, own_run: bool = True, namespace=private_run) -> Daemon:
    """Start argv in its own session, with TMPDIR in workdir and (own_run) in a mount namespace of its
    own that namespace() prepares (by default: an empty /run)."""
    log = workdir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=namespace if own_run else None,
                                env={**os.environ, "TMPDIR": str(daemon_tmpdir(workdir)), **(env or {})})
    return Daemon(name, proc, workdir, socket, log, owned)


def docker(daemon: Daemon, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the docker client against the private daemon."""
    result = subprocess.run([DOCKER_CLIENT, "-H", daemon.host, *args], capture_output=True, text=True,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}\n"
                             f"--- dockerd log ---\n{daemon.log_tail()}")
    return result


def unique_cgroup_parent(engine: str) -> str:
    """A parent cgroup of this engine's containers for one test: engines make theirs (/docker,
    /libpod_parent) in every hierarchy and never remove it."""
    return f"/gct-{engine}-{uuid.uuid4().hex[:8]}"


def dockerd_private_args(workdir: Path, socket: Path, config_file: Path, cgroup_parent: str) -> list[str]:
    """dockerd's flags for a private daemon: data root, exec root and pid file in workdir, its own
    socket and cgroup parent, no networking set-up (docs/reference.md#test-hosts: these flags must not
    also appear in the daemon.json)."""
    return ["--data-root", str(workdir / "data"), "--exec-root", str(workdir / "exec"),
            "--pidfile", str(workdir / "docker.pid"), "-H", f"unix://{socket}",
            "--iptables=false", "--ip6tables=false", "--bridge=none", "--cgroup-parent", cgroup_parent,
            "--config-file", str(config_file)]


def start_dockerd(config_file: Path, workdir: Path | None = None, extra_args: tuple[str, ...] = (),
                  env: dict[str, str] | None = None) -> Daemon:
    """dockerd with its own data root, exec root, pid file and socket; no networking set-up
    (docs/reference.md#test-hosts: these flags must not also appear in the daemon.json). env is added to
    dockerd's environment, which its containerd, the shims and so the OCI runtimes inherit (e.g.
    NVIDIA_CTK_CONFIG_FILE_PATH)."""
    workdir = workdir or short_tempdir("gct-dockerd-")
    data_root, exec_root = workdir / "data", workdir / "exec"
    data_root.mkdir(exist_ok=True)
    exec_root.mkdir(exist_ok=True)
    socket = workdir / "docker.sock"
    cgroup_parent = unique_cgroup_parent("dockerd")
    argv = ["dockerd", *dockerd_private_args(workdir, socket, config_file, cgroup_parent), *extra_args]
    daemon = _spawn("dockerd", argv, workdir, socket, [data_root, exec_root], env,
                    namespace=private_run_and_etc_docker)
    daemon.cgroup_parent = cgroup_parent
    try:
        _wait_for(lambda: socket.exists() and docker(daemon, "version", check=False, timeout=10).returncode == 0,
                  daemon, "its API answered")
    except BaseException:
        stop_daemon(daemon)
        raise
    return daemon


def write_containerd_config_without_cri(workdir: Path, socket: Path, dirs: list[Path]) -> Path:
    """workdir/containerd.toml for a private containerd that ctr talks to (no CRI): root, state and opt in
    dirs (in that order), its sockets beside socket, debug's in workdir."""
    config = workdir / "containerd.toml"
    config.write_text(f"""version = 2
root = "{dirs[0]}"
state = "{dirs[1]}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = "{workdir}/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{dirs[2]}"
""")
    return config


def start_containerd(config_file: Path, socket: Path, owned_dirs: list[Path], workdir: Path | None = None,
                     env: dict[str, str] | None = None) -> Daemon:
    """containerd with a config whose root, state and grpc address point into temp dirs (owned_dirs)."""
    workdir = workdir or short_tempdir("gct-containerd-")
    daemon = _spawn("containerd", ["containerd", "--config", str(config_file)], workdir, socket, owned_dirs, env)
    try:
        _wait_for(lambda: socket.exists() and subprocess.run(
            ["ctr", "--address", str(socket), "version"], capture_output=True, timeout=10).returncode == 0,
            daemon, "its API answered")
    except BaseException:
        stop_daemon(daemon)
        raise
    return daemon


def _pids_naming(paths: list[Path]) -> list[int]:
    """Processes whose command line names one of our dirs (shims that left the daemon's group)."""
    needles = [str(p) for p in paths]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(needle in cmdline for needle in needles):
            found.append(int(entry))
    return found


def _unmount_under(paths: list[Path]) -> None:
    prefixes = [str(p).rstrip("/") + "/" for p in paths]
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    for point in sorted({p for p in points if any((p + "/").startswith(pre) for pre in prefixes)},
                        key=len, reverse=True):
        subprocess.run(["umount", "-n", "-l", point], capture_output=True)


def stop_daemon(daemon: Daemon) -> None:
    """SIGTERM the daemon's process group, SIGKILL it after STOP_TIMEOUT, then clear leftovers."""
    try:
        os.killpg(daemon.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        daemon.proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(daemon.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        daemon.proc.wait(timeout=10)
    dirs = [daemon.workdir, *daemon.owned_dirs]
    for pid in _pids_naming(dirs):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _unmount_under(dirs)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    if daemon.cgroup_parent:
        remove_cgroup_everywhere(daemon.cgroup_parent.lstrip("/"))


def busybox_image_tar(workdir: Path) -> Path:
    """A rootfs tar of busybox-static (tests.e2e.rootfs), for `docker import` / `podman import` (no registry here)."""
    return rootfs_tar(make_rootfs(workdir / "busybox-root"), workdir / "busybox.tar")


# What podman writes outside its --root/--runroot/--tmpdir whatever its flags (seen with strace, podman
# 4.3): runc's state in /run/runc (crun's in /run/crun), its SHM locks in /dev/shm/libpod_lock, the
# blob info cache in /var/lib/containers/cache, the CNI lock in /etc/cni/net.d/cni.lock, temp files in
# /var/tmp; and it reads CDI specs from /etc/cdi and /var/run/cdi (4.3 has no setting for those dirs).
PODMAN_OWN_DIRS = {"/run/cdi": "cdi", "/etc/cdi": "etc-cdi", "/var/lib/containers": "var-lib-containers"}


def podman_places(workdir: str) -> None:
    """Prepares (tests.support.mountns.namespace_holder) the mount namespace a PrivatePodman runs in:
    an empty /run (so /var/run) and /dev/shm of its own, and its own dirs of workdir at /run/cdi (its
    CDI spec dir: `cdi_spec_dir`), /etc/cdi and /var/lib/containers. The network config dir and
    TMPDIR are set in its containers.conf and environment."""
    cover_with_tmpfs("/run", "gct-podman-run")
    if os.path.realpath("/var/run") != "/run":
        cover_with_tmpfs("/var/run", "gct-podman-run")
    cover_with_tmpfs("/dev/shm", "gct-podman-shm", mode="1777")
    for path, name in PODMAN_OWN_DIRS.items():
        own_dir_at(path, "gct-podman", str(Path(workdir) / name))


@dataclass
class PrivatePodman:
    """podman with its own storage (vfs), run root, tmp dir and containers.conf (CONTAINERS_CONF): the
    host's /etc/containers is never read or written. Root lacks CAP_SYS_RESOURCE here, so the conf
    sets ulimits podman can apply (docs/reference.md#test-hosts); runc avoids crun's hybrid-cgroup quirk.

    Every podman runs in one mount namespace of this podman's own (`holder`, podman_places): nothing it,
    conmon, the runtimes or the hooks write at fixed paths reaches the machine's /run, /etc, /dev/shm or
    /var/lib, and two test runs' podmans never share a spec dir, lock or state."""

    workdir: Path
    hooks_dir: Path
    holder: subprocess.Popen
    cgroup_parent: str | None = None  # given to `run` and `create` (conmon's cgroup goes below it too)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.workdir / "containers.conf"),
                "TMPDIR": str(daemon_tmpdir(self.workdir))}

    @property
    def cdi_spec_dir(self) -> Path:
        """The dir podman sees at /run/cdi (and /var/run/cdi)."""
        return self.workdir / PODMAN_OWN_DIRS["/run/cdi"]

    @property
    def run_dir(self) -> Path:
        """podman's /run (where runc, crun and a runtime shim keep their state), seen from here."""
        return Path(f"/proc/{self.holder.pid}/root/run")

    def argv(self, *args: str) -> list[str]:
        w = self.workdir
        if args[:1] in (("run",), ("create",)) and self.cgroup_parent:
            args = (args[0], "--cgroup-parent", self.cgroup_parent, *args[1:])
        return in_namespace(self.holder, [
            "podman", "--root", str(w / "storage"), "--runroot", str(w / "run"), "--tmpdir", str(w / "tmp"),
            "--storage-driver", "vfs", "--hooks-dir", str(self.hooks_dir), "--runtime", "runc",
            "--cgroup-manager", "cgroupfs", "--events-backend", "file", *args])

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        result = subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result


def start_podman(hooks_dir: Path, workdir: Path | None = None) -> PrivatePodman:
    workdir = workdir or short_tempdir("gct-podman-")
    for name in (*PODMAN_OWN_DIRS.values(), "net.d"):
        (workdir / name).mkdir()
    (workdir / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]\n'
        '[engine]\nevents_logger = "file"\ncgroup_manager = "cgroupfs"\n'
        f'[network]\nnetwork_config_dir = "{workdir / "net.d"}"\n')
    holder = namespace_holder("tests.e2e.engines:podman_places", str(workdir))
    return PrivatePodman(workdir, hooks_dir, holder, unique_cgroup_parent("podman"))


def stop_podman(podman: PrivatePodman) -> None:
    podman("rm", "--all", "--force", check=False, timeout=60)
    for pid in _pids_naming([podman.workdir]):  # conmon of a container that did not go away
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stop_holder(podman.holder)
    _unmount_under([podman.workdir])
    shutil.rmtree(podman.workdir, ignore_errors=True)
    if podman.cgroup_parent:
        remove_cgroup_everywhere(podman.cgroup_parent.lstrip("/"))


def _require(*programs: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("starting a private daemon needs root")
    missing = [p for p in programs if shutil.which(p) is None and not os.path.exists(p)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


def _each_stopped_at_the_end(start_one, stop_one):
    """A fixture's body: yield a factory that starts with start_one, then stop all it started, newest first."""
    started = []

    def start(*args, **kw):
        thing = start_one(*args, **kw)
        started.append(thing)
        return thing

    yield start
    for thing in reversed(started):
        stop_one(thing)


@pytest.fixture
def private_dockerd():
    """Factory: start_dockerd(config_file, ...) -> Daemon; all are stopped at teardown."""
    _require("dockerd", DOCKER_CLIENT, "containerd")
    yield from _each_stopped_at_the_end(start_dockerd, stop_daemon)


@pytest.fixture
def ctr_namespace():
    """A containerd namespace of this test; containerd makes a cgroup /<namespace> in each hierarchy
    and keeps it, so it is removed here. Request it before private_containerd, so that it is torn
    down after the daemon has stopped."""
    namespace = f"gct-ctr-{uuid.uuid4().hex[:8]}"
    yield namespace
    remove_cgroup_everywhere(namespace)


@pytest.fixture
def private_containerd():
    """Factory: start_containerd(config_file, socket, owned_dirs) -> Daemon; all are stopped at teardown."""
    _require("containerd", "ctr")
    yield from _each_stopped_at_the_end(start_containerd, stop_daemon)


@pytest.fixture
def private_podman():
    """Factory: start_podman(hooks_dir) -> PrivatePodman (call it like the podman CLI); cleaned at teardown."""
    _require("podman", "runc")
    yield from _each_stopped_at_the_end(start_podman, stop_podman)
