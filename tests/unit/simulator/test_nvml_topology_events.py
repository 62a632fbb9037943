"""The simulated NVML's topology and event calls, read by pynvml (an outside client) and by the toolkit's
binding (cdi.nvml_binding, cdi.nvml_topology), each in its own process: an 8-GPU host with two 4-GPU
NVLink islands (`--nvlink 0-3:4 --nvlink 4-7:4`) and a PCIe tree of two CPUs with two switches each;
XID events raised by `nvidia-ctk simulate xid` from another process waking a waiting
nvmlEventSetWait_v2; a lost GPU (XID 79) answering NVML_ERROR_GPU_IS_LOST until `simulate reset`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from simulator.topology_spec import TOPOLOGY_NODE, TOPOLOGY_SINGLE, TOPOLOGY_SYSTEM
from tests.support.simulated_host import NVIDIA_CTK, marker_inventory

REPO = Path(__file__).resolve().parents[3]
LIB = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
DGX = dict(pcie=("switch=0-1", "switch=2-3", "switch=4-5", "switch=6-7", "cpu=0-3", "cpu=4-7"),
           nvlink=("0-3:4", "4-7:4"))


def build(root: Path, gpus: int, mig=(), pcie=(), nvlink=(), model="NVIDIA A100-SXM4-40GB") -> Path:
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("a simulated host needs root (mknod) and gcc")
    from simulator.host_builder import create_simulated_host

    create_simulated_host(str(root), gpus=gpus, model=model, driver_version="550.54.15", cuda_version="12.4",
                          mig_options=list(mig), pcie_options=list(pcie), nvlink_options=list(nvlink))
    return root


@pytest.fixture(scope="module")
def dgx(tmp_path_factory) -> Path:
    """8 GPUs, two NVLink islands of 4 (4 links per pair), MIG on GPU 7 (two 1g.5gb)."""
    return build(tmp_path_factory.mktemp("dgx") / "host", 8, mig=("7=1g.5gb,1g.5gb",), **DGX)


def python(code: str, *args: str, **kwargs):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            **kwargs)


def run(code: str, *args: str) -> object:
    proc = python(code, *args)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


PYNVML = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)   # pynvml then gets this object for the soname
import pynvml as n
n.nvmlInit()
"""

TOPOLOGY_BY_PYNVML = PYNVML + """
h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
bus = [n.nvmlDeviceGetPciInfo(x).busId for x in h]
bus = [b.decode() if isinstance(b, bytes) else b for b in bus]
def links(a):
    out = {}
    for link in range(n.NVML_NVLINK_MAX_LINKS):
        try:
            if n.nvmlDeviceGetNvLinkState(h[a], link) != n.NVML_FEATURE_ENABLED:
                continue
            remote = n.nvmlDeviceGetNvLinkRemotePciInfo(h[a], link).busId
        except n.NVMLError as e:
            out.setdefault("stop", [link, e.value])
            break
        remote = bus.index(remote.decode() if isinstance(remote, bytes) else remote)
        out[remote] = out.get(remote, 0) + 1
    return out
print(json.dumps({
    "levels": [[n.nvmlDeviceGetTopologyCommonAncestor(a, b) for b in h] for a in h],
    "nvlinks": [links(a) for a in range(len(h))],
    "p2p": {i: [[n.nvmlDeviceGetP2PStatus(a, b, i) if a is not b else None for b in h] for a in h]
            for i in (0, 2, 4)},   # read, NVLink, PCI (pynvml has NVML_P2P_CAPS_INDEX_READ as a tuple)
}))
"""


def test_pynvml_reads_the_dgx_topology(dgx):
    got = run(TOPOLOGY_BY_PYNVML, str(dgx / LIB))
    cpu = [0, 0, 0, 0, 1, 1, 1, 1]
    for a in range(8):
        for b in range(8):
            expected = (0 if a == b else TOPOLOGY_SINGLE if a // 2 == b // 2
                        else TOPOLOGY_NODE if cpu[a] == cpu[b] else TOPOLOGY_SYSTEM)
            assert got["levels"][a][b] == expected, (a, b)
    # 4 links to each island peer, links 0-11 of the A100 all active, then past its last link
    for a in range(8):
        island = [b for b in range(8) if b != a and cpu[b] == cpu[a]]
        assert got["nvlinks"][a] == {**{str(b): 4 for b in island}, "stop": [12, 2]}   # INVALID_ARGUMENT
    nvlink, pci, read = got["p2p"]["2"], got["p2p"]["4"], got["p2p"]["0"]
    assert nvlink[0][3] == 0 and nvlink[0][4] == 5            # OK / NOT_SUPPORTED
    assert pci[0][1] == 0 and pci[0][2] == 3                  # one switch / IOH topology not supported
    assert read[0][2] == 0 and read[0][5] == 3                # NVLink carries it / nothing does


def test_the_binding_reads_the_same_links(dgx):
    got = run("""
        import json, sys
        from cdi.nvml_topology import read_links
        links = read_links(sys.argv[1], list(range(8)))
        print(json.dumps({f"{a}-{b}": [l.pcie_level, l.nvlinks] for (a, b), l in links.items()}))
    """, str(dgx))
    reference = run(TOPOLOGY_BY_PYNVML, str(dgx / LIB))
    for key, (level, nvlinks) in got.items():
        a, b = (int(x) for x in key.split("-"))
        assert level == reference["levels"][a][b]
        assert nvlinks == reference["nvlinks"][a].get(str(b), 0)
    assert got["0-1"] == [TOPOLOGY_SINGLE, 4] and got["0-4"] == [TOPOLOGY_SYSTEM, 0]
    assert marker_inventory(dgx)["topology"]["nvlinks"]["0-3"] == 4


def test_a_host_without_options_is_one_cpu_and_no_nvlink_on_a_t4(tmp_path):
    root = build(tmp_path / "host", 2, model="Tesla T4")
    got = run(PYNVML + """
h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
try:
    n.nvmlDeviceGetNvLinkState(h[0], 0)
    state = "answered"
except n.NVMLError as e:
    state = e.value
print(json.dumps([n.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]), state]))
""", str(root / LIB))
    assert got == [TOPOLOGY_NODE, 3]   # NOT_SUPPORTED


WAITER = PYNVML + """
h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
s = n.nvmlEventSetCreate()
for x in h:
    n.nvmlDeviceRegisterEvents(x, n.nvmlEventTypeXidCriticalError & n.nvmlDeviceGetSupportedEventTypes(x), s)
print("registered", flush=True)
got = []
for _ in range(int(sys.argv[2])):
    try:
        e = n.nvmlEventSetWait_v2(s, int(sys.argv[3]))
    except n.NVMLError as err:
        got.append({"error": err.value})
        continue
    index = [ctypes.cast(x, ctypes.c_void_p).value for x in h].index(ctypes.cast(e.device, ctypes.c_void_p).value)
    got.append({"gpu": index, "type": e.eventType, "xid": e.eventData, "gi": e.gpuInstanceId,
                "ci": e.computeInstanceId})
n.nvmlEventSetFree(s)
print(json.dumps(got))
"""


def simulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(NVIDIA_CTK), "simulate", *args], capture_output=True, text=True)


def wait_registered(proc) -> None:
    assert proc.stdout.readline().strip() == "registered", proc.stderr.read()


def test_an_xid_from_another_process_wakes_a_waiting_event_set(dgx):
    simulate("xid", str(dgx), "--gpu", "1", "--xid", "31")   # before the set exists: never delivered
    waiter = python(WAITER, str(dgx / LIB), "3", "600000")   # 10 min: a wake-up can only come from the events
    try:
        wait_registered(waiter)
        time.sleep(0.2)   # let it block in nvmlEventSetWait_v2
        for args in (["--gpu", "2", "--xid", "48"], ["--gpu", "7", "--xid", "94", "--mig", "1"],
                     ["--gpu", "5", "--xid", "13"]):
            done = simulate("xid", str(dgx), *args)
            assert done.returncode == 0, done.stderr
        out, err = waiter.communicate(timeout=60)
    finally:
        waiter.kill()
        waiter.wait()
    whole = 0xFFFFFFFF
    mig = marker_inventory(dgx)["gpus"][7]["mig_devices"][1]
    assert json.loads(out) == [{"gpu": 2, "type": 8, "xid": 48, "gi": whole, "ci": whole},
                               {"gpu": 7, "type": 8, "xid": 94, "gi": mig["gi"], "ci": mig["ci"]},
                               {"gpu": 5, "type": 8, "xid": 13, "gi": whole, "ci": whole}], err


BINDING_WAITER = """
import json, sys
from cdi.nvml_binding import NvmlCallError, handle_address, load_library
lib = load_library(sys.argv[1])
lib.init()
h = [lib.device_handle_by_index(i) for i in range(lib.device_count())]
s = lib.event_set_create()
for x in h:
    lib.device_register_events(x, 0x8 & lib.device_supported_event_types(x), s)
print("registered", flush=True)
got = []
for _ in range(int(sys.argv[2])):
    try:
        e = lib.event_set_wait(s, int(sys.argv[3]))
    except NvmlCallError as err:
        got.append({"error": err.code})
        continue
    got.append({"gpu": [handle_address(x) for x in h].index(e.device), "type": e.eventType, "xid": e.eventData,
                "gi": e.gpuInstanceId, "ci": e.computeInstanceId})
lib.event_set_free(s)
print(json.dumps(got))
"""


def test_the_binding_receives_what_pynvml_receives(dgx):
    waiters = [python(code, str(dgx / LIB), "3", "600000") for code in (WAITER, BINDING_WAITER)]
    try:
        for waiter in waiters:
            wait_registered(waiter)
        for args in (["--gpu", "0", "--xid", "63"], ["--gpu", "7", "--xid", "31", "--mig", "0"],
                     ["--gpu", "6", "--xid", "109"]):
            assert simulate("xid", str(dgx), *args).returncode == 0
        outputs = [json.loads(w.communicate(timeout=60)[0]) for w in waiters]
    finally:
        for waiter in waiters:
            waiter.kill()
            waiter.wait()
    assert outputs[0] == outputs[1]
    assert [(e["gpu"], e["xid"]) for e in outputs[1]] == [(0, 63), (7, 31), (6, 109)]


def test_a_wait_with_no_event_times_out(dgx):
    proc = python(WAITER, str(dgx / LIB), "1", "50")
    out, err = proc.communicate(timeout=120)
    assert out.splitlines()[0] == "registered", err
    assert json.loads(out.splitlines()[1]) == [{"error": 10}]   # NVML_ERROR_TIMEOUT


LOST = PYNVML + """
def attempt(read):
    try:
        read()
        return "ok"
    except n.NVMLError as e:
        return e.value
uuid = sys.argv[2]
print(json.dumps({"by index": attempt(lambda: n.nvmlDeviceGetHandleByIndex(int(sys.argv[3]))),
                  "by uuid": attempt(lambda: n.nvmlDeviceGetHandleByUUID(uuid)),
                  "other": attempt(lambda: n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(0)))}))
"""


def test_xid_79_loses_the_gpu_until_it_is_reset(dgx):
    uuid = marker_inventory(dgx)["gpus"][3]["uuid"]
    # a process that holds a handle from before sees the loss too
    holder = python(PYNVML + """
h = n.nvmlDeviceGetHandleByIndex(3)
print("ready", flush=True)
sys.stdin.readline()
try:
    n.nvmlDeviceGetName(h)
    print("ok")
except n.NVMLError as e:
    print(e.value)
""", str(dgx / LIB), stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert simulate("xid", str(dgx), "--gpu", "3", "--xid", "79").returncode == 0
        assert run(LOST, str(dgx / LIB), uuid, "3") == {"by index": 15, "by uuid": 15, "other": "ok"}
        listed = subprocess.run([str(dgx / "usr/bin/nvidia-smi"), "-L"], capture_output=True, text=True).stdout
        assert "Unable to determine the device handle for GPU 3: GPU is lost\n" in listed and uuid not in listed
        assert listed.count("UUID: GPU-") == 7
        out, _ = holder.communicate("\n", timeout=60)
        assert out.strip() == "15"   # NVML_ERROR_GPU_IS_LOST
    finally:
        holder.kill()
        holder.wait()
        done = simulate("reset", str(dgx), "--gpu", "3")
    assert done.returncode == 0 and uuid in done.stdout
    assert run(LOST, str(dgx / LIB), uuid, "3") == {"by index": "ok", "by uuid": "ok", "other": "ok"}


@pytest.mark.parametrize("args, message", [
    (["xid", "--gpu", "8", "--xid", "79"], "GPU 8 does not exist on a host with 8 GPUs (--gpu)"),
    (["xid", "--gpu", "0", "--xid", "79", "--mig", "0"], "GPU 0 has 0 MIG devices, there is no MIG device 0 (--mig)"),
    (["reset", "--gpu", "-1"], "GPU -1 does not exist on a host with 8 GPUs (--gpu)"),
])
def test_simulate_xid_and_reset_errors_are_one_line(dgx, args, message):
    done = simulate(args[0], str(dgx), *args[1:])
    assert done.returncode == 1
    assert done.stderr == f"nvidia-ctk: error: {message}\n"


def test_simulate_xid_on_a_directory_that_is_no_host(tmp_path):
    done = simulate("xid", str(tmp_path), "--gpu", "0", "--xid", "79")
    assert done.returncode == 1
    assert done.stderr == f"nvidia-ctk: error: not a simulated host (nvidia-ctk simulate create makes one) ({tmp_path})\n"
