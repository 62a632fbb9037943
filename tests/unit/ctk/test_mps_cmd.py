"""`nvidia-ctk mps start|stop|status` (cdi.mps_daemon) on a simulated host, and the container edits of a
share (cdi.mps.share_edits). Every nvidia-ctk runs in one private mount namespace of the test's
(tests.support.mountns), so the shm tmpfs it mounts is never the machine's; every daemon is stopped at the end."""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess

import pytest

from tests.support.mountns import process_in_mount_ns
from cdi.nvml import load_inventory
from tests.support.simulated_host import NVIDIA_CTK, create_in_process

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("gcc") is None,
                                reason="a simulated host and mounts need root and gcc")

GIB = 1 << 30


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    root = tmp_path_factory.mktemp("mps-host") / "host"
    create_in_process(root, gpus=3, mig_options=("2=1g.5gb,1g.5gb",))
    return root, load_inventory(str(root))      # as nvidia-ctk reads it (memory sizes included)


@pytest.fixture
def ns(tmp_path):
    """Run nvidia-ctk in the test's mount namespace: ns(*args) -> CompletedProcess."""
    root = tmp_path / "mps"
    with process_in_mount_ns() as pid:
        def run(*args: str, check: bool = True):
            done = subprocess.run(["nsenter", "-t", str(pid), "-m", str(NVIDIA_CTK), *args], capture_output=True,
                                  text=True, timeout=120, env={"PATH": os.environ["PATH"]})
            assert not check or done.returncode == 0, done.stderr
            return done
        run.root, run.pid = root, pid
        try:
            yield run
        finally:
            if root.is_dir() and any(root.glob("*/share.json")):
                run("mps", "stop", "--all", "--mps-root", str(root), check=False)


def mounts_of(pid: int, under) -> list[str]:
    with open(f"/proc/{pid}/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(str(under))]


def daemon_shm_is(daemon_pid: int, ns_pid: int, shm) -> bool:
    """The daemon's /dev/shm is the device's tmpfs as the namespace of nvidia-ctk sees it (each seen
    through the process's own root), and not the machine's /dev/shm."""
    ours = os.stat(f"/proc/{ns_pid}/root{shm}").st_dev
    return os.stat(f"/proc/{daemon_pid}/root/dev/shm").st_dev == ours != os.stat("/dev/shm").st_dev


def test_two_daemons_with_their_limits_status_and_stop(host, ns):
    root, inventory = host
    gpu0, gpu1 = inventory.gpus[0], inventory.gpus[1]
    started = ns("mps", "start", "--device", "0", "--replicas", "2", "--mps-root", str(ns.root),
                 "--driver-root", str(root))
    assert re.fullmatch(rf"MPS control daemon started for {gpu0.uuid} \(device 0, pid \d+\): 2 shares of 50% "
                        rf"threads and {gpu0.memory_total // 2 >> 20}M pinned memory\n", started.stdout)
    ns("mps", "start", "--device", gpu1.uuid, "--replicas", "4", "--mps-root", str(ns.root), "--driver-root", str(root))

    rows = {row["uuid"]: row for row in json.loads(ns("mps", "status", "--mps-root", str(ns.root), "--format",
                                                      "json").stdout)}
    assert set(rows) == {gpu0.uuid, gpu1.uuid}
    for gpu, replicas, percentage in ((gpu0, 2, 50.0), (gpu1, 4, 25.0)):
        row = rows[gpu.uuid]
        assert row["running"] and row["replicas"] == replicas
        assert row["daemon_active_thread_percentage"] == percentage               # asked with get_default_*
        assert row["daemon_pinned_mem_limit"] == gpu.memory_total // replicas
        shm = ns.root / gpu.uuid / "shm"
        assert daemon_shm_is(row["pid"], ns.pid, shm)
        # the daemon runs with the device alone visible, our folders, and no other environment
        env = dict(v.split("=", 1) for v in open(f"/proc/{row['pid']}/environ").read().split("\0") if v)
        assert env["CUDA_VISIBLE_DEVICES"] == gpu.uuid
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(ns.root / gpu.uuid / "pipe")
        assert env["CUDA_MPS_LOG_DIRECTORY"] == str(ns.root / gpu.uuid / "log")
        assert "Starting control daemon" in (ns.root / gpu.uuid / "log/control.log").read_text()
    assert gpu0.memory_total // 2 == 20 * GIB and gpu1.memory_total // 4 == 10 * GIB   # A100 40GB
    table = ns("mps", "status", "--mps-root", str(ns.root)).stdout.splitlines()
    assert table[1].split() == ["0", gpu0.uuid, "2", "50%", "20480M", str(rows[gpu0.uuid]["pid"]), "running"]
    assert table[2].split() == ["1", gpu1.uuid, "4", "25%", "10240M", str(rows[gpu1.uuid]["pid"]), "running"]
    assert sorted(mounts_of(ns.pid, ns.root)) == sorted(str(ns.root / g.uuid / "shm") for g in (gpu0, gpu1))
    # the host's own mount table never sees them
    assert mounts_of(os.getpid(), ns.root) == []

    again = ns("mps", "start", "--device", "0", "--replicas", "3", "--mps-root", str(ns.root), "--driver-root",
               str(root), check=False)
    assert again.returncode == 1 and again.stderr == (
        f"nvidia-ctk: error: an MPS control daemon already runs for the device (nvidia-ctk mps stop first) "
        f"({ns.root / gpu0.uuid})\n")

    assert ns("mps", "stop", "--device", "0", "--mps-root", str(ns.root)).stdout == \
        f"MPS control daemon stopped for {gpu0.uuid}\n"
    assert not os.path.exists(f"/proc/{rows[gpu0.uuid]['pid']}/stat") or \
        open(f"/proc/{rows[gpu0.uuid]['pid']}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    ns("mps", "stop", "--all", "--mps-root", str(ns.root))
    assert mounts_of(ns.pid, ns.root) == []
    assert json.loads(ns("mps", "status", "--mps-root", str(ns.root), "--format", "json").stdout) == []
    for gpu in (gpu0, gpu1):      # the logs stay, the rest is gone
        assert sorted(os.listdir(ns.root / gpu.uuid)) == ["log"]


def compute_modes(root) -> list[str]:
    """Each GPU's compute mode, as the host's nvidia-smi reads it."""
    done = subprocess.run([str(root / "usr/bin/nvidia-smi"), "--query-gpu=compute_mode", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.split()


def set_compute_mode(root, gpu: int, mode: str) -> None:
    subprocess.run([str(root / "usr/bin/nvidia-smi"), "-i", str(gpu), "-c", mode], capture_output=True,
                   timeout=30, check=True)


def test_start_makes_the_gpu_exclusive_process_and_stop_puts_default_back(host, ns):
    root, inventory = host
    assert compute_modes(root) == ["Default"] * 3
    ns("mps", "start", "--device", "0", "--replicas", "2", "--mps-root", str(ns.root), "--driver-root", str(root))
    assert compute_modes(root) == ["Exclusive_Process", "Default", "Default"]
    share = json.loads((ns.root / inventory.gpus[0].uuid / "share.json").read_text())
    assert share["compute_mode_set"] is True
    ns("mps", "stop", "--device", "0", "--mps-root", str(ns.root))
    assert compute_modes(root) == ["Default"] * 3


def test_a_gpu_already_exclusive_stays_so_and_a_prohibited_one_is_refused(host, ns):
    root, inventory = host
    set_compute_mode(root, 1, "EXCLUSIVE_PROCESS")
    set_compute_mode(root, 0, "PROHIBITED")
    try:
        ns("mps", "start", "--device", "1", "--replicas", "2", "--mps-root", str(ns.root), "--driver-root", str(root))
        ns("mps", "stop", "--device", "1", "--mps-root", str(ns.root))
        assert compute_modes(root)[1] == "Exclusive_Process"      # not ours to change back
        refused = ns("mps", "start", "--device", "0", "--replicas", "2", "--mps-root", str(ns.root),
                     "--driver-root", str(root), check=False)
        uuid = inventory.gpus[0].uuid
        assert refused.returncode == 1 and refused.stderr == (
            "nvidia-ctk: error: the GPU is in PROHIBITED compute mode, which runs no MPS server (set DEFAULT or "
            f"EXCLUSIVE_PROCESS first: nvidia-smi -i {uuid} -c DEFAULT) ({uuid})\n")
        assert not (ns.root / uuid / "share.json").exists() and mounts_of(ns.pid, ns.root) == []
        assert compute_modes(root)[0] == "Prohibited"
    finally:
        set_compute_mode(root, 0, "DEFAULT")
        set_compute_mode(root, 1, "DEFAULT")


def test_a_mig_device_and_a_dead_daemon(host, ns):
    root, inventory = host
    mig = inventory.gpus[2].mig_devices[0]
    ns("mps", "start", "--device", "2:0", "--replicas", "2", "--mps-root", str(ns.root), "--driver-root", str(root))
    row = json.loads(ns("mps", "status", "--mps-root", str(ns.root), "--format", "json").stdout)[0]
    assert row["uuid"] == mig.uuid and row["device"] == "2:0" and row["running"]
    assert row["daemon_pinned_mem_limit"] == mig.memory_total // 2 >> 20 << 20
    gone = os.pidfd_open(row["pid"])
    os.kill(row["pid"], 9)
    assert select.select([gone], [], [], 30)[0]
    os.close(gone)
    dead = json.loads(ns("mps", "status", "--mps-root", str(ns.root), "--format", "json").stdout)[0]
    assert not dead["running"]
    # start again over what the dead daemon left (its stale socket, the still mounted shm)
    ns("mps", "start", "--device", mig.uuid, "--replicas", "2", "--mps-root", str(ns.root), "--driver-root", str(root))
    assert json.loads(ns("mps", "status", "--mps-root", str(ns.root), "--format", "json").stdout)[0]["running"]
    assert len(mounts_of(ns.pid, ns.root)) == 1
    assert compute_modes(root)[2] == "Default"      # a MIG device's mode is its GPU's, shared: left alone


def test_starts_at_the_same_moment_give_one_daemon(host, ns):
    root, inventory = host
    argv = ["nsenter", "-t", str(ns.pid), "-m", str(NVIDIA_CTK), "mps", "start", "--device", "0", "--replicas", "2",
            "--mps-root", str(ns.root), "--driver-root", str(root)]
    starts = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={"PATH": os.environ["PATH"]}) for _ in range(3)]
    results = sorted((p.wait(timeout=120), p.stderr.read()) for p in starts)
    for p in starts:
        p.stdout.close()
        p.stderr.close()
    refused = (1, "nvidia-ctk: error: an MPS control daemon already runs for the device (nvidia-ctk mps stop first) "
                  f"({ns.root / inventory.gpus[0].uuid})\n")
    assert results == [(0, ""), refused, refused]
    assert [row["running"] for row in json.loads(ns("mps", "status", "--mps-root", str(ns.root), "--format",
                                                    "json").stdout)] == [True]
    assert len(mounts_of(ns.pid, ns.root)) == 1


def test_stop_ends_a_daemon_whose_socket_is_gone(host, ns):
    root, inventory = host
    uuid = inventory.gpus[0].uuid
    ns("mps", "start", "--device", "0", "--replicas", "2", "--mps-root", str(ns.root), "--driver-root", str(root))
    pid = json.loads(ns("mps", "status", "--mps-root", str(ns.root), "--format", "json").stdout)[0]["pid"]
    gone = os.pidfd_open(pid)
    try:
        (ns.root / uuid / "pipe/control").unlink()      # quit can no longer reach it
        ns("mps", "stop", "--device", "0", "--mps-root", str(ns.root))
        assert select.select([gone], [], [], 0)[0]      # ended before stop returned
    finally:
        os.close(gone)
    assert mounts_of(ns.pid, ns.root) == [] and sorted(os.listdir(ns.root / uuid)) == ["log"]
    assert "Exit (SIGTERM)" in (ns.root / uuid / "log/control.log").read_text()


def test_share_edits(host, ns):
    from cdi.mps import MpsError, share_edits

    root, inventory = host
    uuid = inventory.gpus[0].uuid
    with pytest.raises(MpsError, match="no MPS control daemon runs for the device"):
        share_edits(str(ns.root), uuid)
    ns("mps", "start", "--device", "0", "--replicas", "2", "--mps-root", str(ns.root), "--driver-root", str(root))
    edits = share_edits(str(ns.root), uuid)
    assert edits.env == ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"]
    assert [(m.host_path, m.container_path, m.options) for m in edits.mounts] == [
        (str(ns.root / uuid / "pipe"), "/tmp/nvidia-mps", ["ro", "nosuid", "nodev", "noexec", "bind"]),
        (str(ns.root / uuid / "shm"), "/dev/shm", ["nosuid", "nodev", "noexec", "bind"])]


@pytest.mark.parametrize("args, message", [
    (["start", "--device", "7", "--replicas", "2"], "no such device (an index, a GPU:MIG index pair or a UUID) (7)"),
    (["start", "--device", "2", "--replicas", "2"], "the GPU is in MIG mode: share its MIG devices instead (2)"),
    (["start", "--device", "0", "--replicas", "0"], "replicas must be 1 to 100, not 0 (--replicas)"),
    (["stop", "--device", "0"], "no MPS control daemon was started for the device (0)"),
    (["stop"], "give --device ID or --all (nvidia-ctk mps stop)"),
])
def test_one_line_errors(host, ns, args, message):
    root, _ = host
    extra = ["--driver-root", str(root)] if args[0] == "start" else []
    done = ns("mps", *args, "--mps-root", str(ns.root), *extra, check=False)
    assert done.returncode == 1 and done.stderr == f"nvidia-ctk: error: {message}\n"
    assert not ns.root.exists() or not any(ns.root.iterdir())      # nothing made on the way


def test_a_driver_root_without_a_control_program(tmp_path):
    from cdi.driver_root import DriverRoot
    from cdi.mps import MpsError
    from cdi.mps_daemon import control_program

    with pytest.raises(MpsError) as caught:
        control_program(DriverRoot(str(tmp_path)))
    assert str(caught.value) == f"no nvidia-cuda-mps-control in the driver root ({tmp_path}/usr/bin/nvidia-cuda-mps-control)"
