"""The private engines of tests/e2e/engines.py leave nothing at the machine's fixed paths: each daemon
has a /run of its own (dockerd's /run/docker/plugins, containerd's /run/containerd/{s,runc,fifo} land
there and go with its mount namespace) and its TMPDIR in its own dir (containerd writes
containerd.<pid>.stacks.log to TMPDIR on SIGUSR1, which dockerd sends before it kills a containerd
that stopped answering, e.g. on a busy machine). dockerd has an /etc/docker of its own as well: it
writes its identity key.json there when it finds none."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.e2e.engines import Daemon, short_tempdir

STACKS_TIMEOUT = 30.0


def _containerd_of(daemon: Daemon) -> int:
    """The pid of the containerd dockerd started (its child, in its session)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == daemon.proc.pid and cmdline[0].endswith(b"containerd"):
            return int(entry)
    raise AssertionError(f"no containerd below dockerd {daemon.proc.pid}:\n{daemon.log_tail()}")


def _stacks_log_after_sigusr1(daemon: Daemon, containerd_pid: int) -> Path:
    """SIGUSR1 to containerd; where its stack dump went. Not in the machine's /tmp: removed if there,
    the test fails."""
    name = f"containerd.{containerd_pid}.stacks.log"
    ours, machines = daemon.workdir / "tmp" / name, Path("/tmp") / name
    os.kill(containerd_pid, signal.SIGUSR1)
    deadline = time.monotonic() + STACKS_TIMEOUT
    while time.monotonic() < deadline and not (ours.exists() or machines.exists()):
        time.sleep(0.1)
    if machines.exists():
        machines.unlink()
        raise AssertionError(f"containerd wrote its stacks to the machine's {machines}")
    assert ours.is_file(), daemon.log_tail()
    return ours


def _own_run(daemon: Daemon) -> Path:
    """The daemon's /run, as seen from here; asserted not to be the machine's."""
    theirs = Path(f"/proc/{daemon.proc.pid}/root/run")
    assert os.stat(theirs).st_dev != os.stat("/run").st_dev, "the daemon writes to the machine's /run"
    return theirs


def _own_etc_docker(daemon: Daemon) -> Path:
    """The daemon's /etc/docker, as seen from here; asserted not to be the machine's."""
    theirs = Path(f"/proc/{daemon.proc.pid}/root/etc/docker")
    machines = Path("/etc/docker")
    assert not machines.is_dir() or os.stat(theirs).st_dev != os.stat(machines).st_dev, \
        "the daemon writes to the machine's /etc/docker"
    return theirs


def test_private_dockerd_and_its_containerd_keep_run_etc_docker_and_tmp_to_themselves(private_dockerd):
    work = short_tempdir("gct-guest-")
    try:
        (work / "daemon.json").write_text('{"storage-driver": "vfs"}\n')
        daemon = private_dockerd(work / "daemon.json")
        _stacks_log_after_sigusr1(daemon, _containerd_of(daemon))
        assert (_own_run(daemon) / "docker" / "plugins").is_dir()
        assert (_own_etc_docker(daemon) / "key.json").is_file()   # made in its own, empty /etc/docker
    finally:
        subprocess.run(["rm", "-rf", str(work)])


def test_private_containerd_keeps_run_and_tmp_to_itself(private_containerd):
    workdir = short_tempdir("gct-guest-")
    dirs = [workdir / "root", workdir / "state"]
    socket = workdir / "c.sock"
    config = workdir / "containerd.toml"
    config.write_text(f'version = 2\nroot = "{dirs[0]}"\nstate = "{dirs[1]}"\n'
                      f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{socket}"\n')
    daemon = private_containerd(config, socket, dirs, workdir=workdir)
    _stacks_log_after_sigusr1(daemon, daemon.proc.pid)
    _own_run(daemon)
