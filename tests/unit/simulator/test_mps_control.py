"""The simulated MPS (simulator/csrc/mps_control.c, mps_client.c): the control daemon started with -d in a
temp pipe and log directory, commands sent through the control program, the limits a client gets, and
the rules the device plugin relies on: a client's own environment only lowers the daemon's limits, and a
process in another PID namespace (a container) cannot change them. Every daemon is stopped at the end."""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from simulator import native_build

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the simulated MPS is built with gcc")


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mps-bin")
    native_build.build_mps_programs(out)
    return out


class Daemon:
    def __init__(self, bindir: Path, base: Path, visible: str = "GPU-aaaa,GPU-bbbb"):
        self.bindir, self.pipe, self.log = bindir, base / "pipe", base / "log"
        self.env = {"PATH": "/usr/bin:/bin", "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe),
                    "CUDA_MPS_LOG_DIRECTORY": str(self.log), "CUDA_VISIBLE_DEVICES": visible}

    def run(self, *args: str, stdin: str = "", env: dict | None = None, prefix: tuple[str, ...] = ()):
        return subprocess.run([*prefix, str(self.bindir / "nvidia-cuda-mps-control"), *args], input=stdin,
                              capture_output=True, text=True, env={**self.env, **(env or {})}, timeout=30)

    def send(self, *commands: str, prefix: tuple[str, ...] = ()) -> str:
        done = self.run(stdin="".join(c + "\n" for c in commands), prefix=prefix)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def client(self, **env: str) -> dict[str, str]:
        done = subprocess.run([str(self.bindir / "gct-cuda-mps-client")], capture_output=True, text=True,
                              env={**self.env, **env}, timeout=30)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        values = dict(line.split("=", 1) for line in lines if not line.startswith("device="))
        values["devices"] = [line for line in lines if line.startswith("device=")]
        return values

    def pid(self) -> int | None:
        try:
            return int((self.pipe / "nvidia-cuda-mps-control.pid").read_text())
        except FileNotFoundError:
            return None


@pytest.fixture
def daemon(programs, tmp_path):
    d = Daemon(programs, tmp_path)
    started = d.run("-d")
    assert started.returncode == 0, started.stderr
    yield d
    pid = d.pid()
    if pid is not None:     # a test that failed before quit: end the daemon and its server
        subprocess.run(["pkill", "-TERM", "-P", str(pid)], check=False)
        os.kill(pid, signal.SIGKILL)


def wait_gone(pid: int) -> None:
    """Until the process has ended (a pidfd turns readable), at most 30 s."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        assert select.select([fd], [], [], 30)[0], f"process {pid} still runs"
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_daemon_files_commands_and_logs(daemon):
    assert stat.S_ISSOCK((daemon.pipe / "control").stat().st_mode)
    pid = daemon.pid()
    assert alive(pid) and pid != os.getpid()
    assert daemon.send("get_default_active_thread_percentage", "get_default_device_pinned_mem_limit 0",
                       "get_server_list") == "100.0\n0\n"
    assert daemon.send("set_default_active_thread_percentage 25", "get_default_active_thread_percentage",
                       "set_default_device_pinned_mem_limit 1 10G", "get_default_device_pinned_mem_limit 1",
                       "set_default_device_pinned_mem_limit 0 1536M", "get_default_device_pinned_mem_limit 0") \
        == "25.0\n25.0\n10G\n1536M\n"
    assert daemon.send("start_server -uid 0") == ""
    servers = daemon.send("get_server_list").split()
    assert len(servers) == 1 and alive(int(servers[0]))
    control_log = (daemon.log / "control.log").read_text()
    assert re.search(rf"^\[\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{3}} Control {pid}\] Starting control daemon "
                     rf"using socket {re.escape(str(daemon.pipe))}/control$", control_log, re.M)
    assert f"Control {pid}] Cmd:set_default_active_thread_percentage" in control_log
    assert f"Starting new server {servers[0]} for user 0" in control_log
    assert daemon.send("quit") == ""
    wait_gone(pid)
    assert not alive(int(servers[0]))       # the daemon waited for its server
    assert sorted(os.listdir(daemon.pipe)) == []      # socket and pid file removed
    server_log = (daemon.log / "server.log").read_text()
    assert f"Server {servers[0]}] Startup" in server_log and "Device 1 pinned memory limit 10G" in server_log


def test_client_gets_the_defaults_its_server_was_started_with(daemon):
    daemon.send("set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 20G")
    got = daemon.client()
    assert got["active_thread_percentage"] == got["daemon_active_thread_percentage"] == "50.0"
    assert got["server_pid"] == daemon.send("get_server_list").strip()
    assert got["devices"] == [f"device=0 name=GPU-aaaa pinned_mem_limit={20 << 30} daemon_pinned_mem_limit={20 << 30}",
                              "device=1 name=GPU-bbbb pinned_mem_limit=0 daemon_pinned_mem_limit=0"]
    # a running server keeps its limits: new defaults are for the next server (NVIDIA's rule)
    daemon.send("set_default_active_thread_percentage 10")
    assert daemon.client()["active_thread_percentage"] == "50.0"
    daemon.send("quit")


def test_client_environment_lowers_but_never_raises(daemon):
    daemon.send("set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 2G")
    raised = daemon.client(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="100", CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=8G")
    assert raised["active_thread_percentage"] == "50.0"
    assert raised["devices"][0].startswith(f"device=0 name=GPU-aaaa pinned_mem_limit={2 << 30} ")
    lowered = daemon.client(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="20", CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=1G")
    assert lowered["active_thread_percentage"] == "20.0" and lowered["daemon_active_thread_percentage"] == "50.0"
    assert lowered["devices"][0] == f"device=0 name=GPU-aaaa pinned_mem_limit={1 << 30} daemon_pinned_mem_limit={2 << 30}"
    daemon.send("quit")


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace of its own needs root")
def test_another_pid_namespace_reads_but_cannot_change(daemon):
    other = ("unshare", "--pid", "--fork")
    daemon.send("set_default_active_thread_percentage 50")
    answer = daemon.send("set_default_active_thread_percentage 100", "get_default_active_thread_percentage",
                         "quit", prefix=other)
    assert answer.splitlines() == [
        "Refused: set_default_active_thread_percentage only from the daemon's own PID namespace", "50.0",
        "Refused: quit only from the daemon's own PID namespace"]
    assert alive(daemon.pid())
    assert daemon.send("get_default_active_thread_percentage") == "50.0\n"
    daemon.send("quit")


def test_a_silent_connection_does_not_stop_the_others(daemon):
    """Any share's container can connect: one that says nothing, or asks without reading the answers,
    must not keep the daemon from answering everyone else."""
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    greedy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        silent.connect(str(daemon.pipe / "control"))
        greedy.connect(str(daemon.pipe / "control"))
        greedy.settimeout(10)
        try:       # the daemon drops it once its answers no longer fit the socket's buffer
            greedy.sendall(b"ui\n" + b"get_default_active_thread_percentage\n" * 100000)
        except (BrokenPipeError, ConnectionResetError):
            pass
        silent.sendall(b"ui\nget_server_list")      # half a line
        assert daemon.send("set_default_active_thread_percentage 40") == "40.0\n"
        assert daemon.client()["active_thread_percentage"] == "40.0"
    finally:
        silent.close()
        greedy.close()
    daemon.send("quit")


def test_bad_input_and_a_second_daemon(daemon):
    assert daemon.send("set_default_active_thread_percentage 0", "set_default_active_thread_percentage abc",
                       "set_default_device_pinned_mem_limit 0 2X", "set_default_device_pinned_mem_limit x 2G",
                       "start_server -uid nobody", "frobnicate").splitlines() == [
        "Invalid active thread percentage 0 (more than 0, at most 100)",
        "Invalid active thread percentage abc (more than 0, at most 100)",
        "Invalid memory limit 2X (a number with K, M, G or T)",
        "Invalid device x", "Invalid user id nobody", "Unknown command or wrong arguments: frobnicate"]
    second = daemon.run("-d")
    assert second.returncode == 1 and second.stderr == "An instance of this daemon is already running\n"
    daemon.send("quit")


def test_no_daemon(programs, tmp_path):
    d = Daemon(programs, tmp_path)
    d.pipe.mkdir()
    done = d.run(stdin="get_server_list\n")
    assert done.returncode == 1 and done.stderr == f"Cannot find MPS control daemon process ({d.pipe}/control)\n"
    client = subprocess.run([str(programs / "gct-cuda-mps-client")], capture_output=True, text=True, env=d.env)
    assert client.returncode == 1
    assert client.stderr == f"gct-cuda-mps-client: error: no MPS control daemon answers ({d.pipe}/control)\n"
