"""`nvidia-ctk simulate create` end to end: the driver root it builds (device nodes, real ELF libraries,
ld.so.cache, socket, proc/sys files), nvidia-smi's output on it, and `nvidia-ctk info` over it."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from cdi.elf import read_elf_library
from cdi.ldcache import read_ld_cache
from simulator import driver_files

pytestmark = pytest.mark.e2e

V = "550.54.15"


def has_interpreter(path: Path) -> bool:
    """True when the ELF executable names a dynamic loader (a PT_INTERP program header)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, path   # 64-bit ELF
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))


def ctk(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctk.main", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("gcc"):
        pytest.skip("a simulated host needs root (mknod) and gcc")
    root = tmp_path_factory.mktemp("cli") / "host"
    done = ctk("simulate", "create", str(root), "--mig", "1=3g.20gb,1g.5gb", "--imex-channels", "2")
    assert done.returncode == 0, done.stderr
    assert "2 x NVIDIA A100-SXM4-40GB, 2 MIG devices" in done.stdout
    data = json.loads((root / ".nvidia-simulated-host.json").read_text())
    assert data["simulated_host"] is True
    return root, data["inventory"], data["majors"]


def test_device_nodes_use_free_majors_and_real_minors(host):
    root, inv, majors = host
    used = {int(line.split()[0]) for line in Path("/proc/devices").read_text().split("Block devices:")[0].splitlines()[1:]
            if line.strip()}
    chosen = {majors["nvidia"], majors["nvidia-uvm"], majors["nvidia-caps"], majors["nvidia-caps-imex-channels"],
              majors["drm"]}
    assert len(chosen) == 5 and not chosen & used
    if 195 not in used:
        assert majors["nvidia"] == 195
    if 226 not in used:
        assert majors["drm"] == 226
    expected = {"nvidiactl": (majors["nvidia"], 255), "nvidia-modeset": (majors["nvidia"], 254),
                "nvidia0": (majors["nvidia"], 0), "nvidia1": (majors["nvidia"], 1),
                "nvidia-uvm": (majors["nvidia-uvm"], 0), "nvidia-uvm-tools": (majors["nvidia-uvm"], 1),
                "nvidia-caps/nvidia-cap1": (majors["nvidia-caps"], 1),
                "nvidia-caps/nvidia-cap2": (majors["nvidia-caps"], 2),
                "nvidia-caps-imex-channels/channel0": (majors["nvidia-caps-imex-channels"], 0),
                "nvidia-caps-imex-channels/channel1": (majors["nvidia-caps-imex-channels"], 1),
                # each GPU's DRM nodes, as sysfs lists them under its PCI device
                "dri/card1": (majors["drm"], 1), "dri/renderD128": (majors["drm"], 128),
                "dri/card2": (majors["drm"], 2), "dri/renderD129": (majors["drm"], 129)}
    for mig in inv["gpus"][1]["mig_devices"]:
        for key in ("gi_cap_minor", "ci_cap_minor"):
            expected[f"nvidia-caps/nvidia-cap{mig[key]}"] = (majors["nvidia-caps"], mig[key])
    found = {str(p.relative_to(root / "dev")): p for p in (root / "dev").rglob("*") if not p.is_dir()}
    assert set(found) == set(expected)
    for name, (major, minor) in expected.items():
        st = found[name].lstat()
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor), name
    assert stat.S_IMODE((root / "dev/nvidia0").stat().st_mode) == 0o666


def test_every_driver_library_is_a_real_elf_with_its_soname_and_in_the_cache(host):
    root, _, _ = host
    cache = {(e.soname, e.path, e.is_64bit) for e in read_ld_cache(str(root / "etc/ld.so.cache"))}
    has32 = (root / driver_files.LIB32_DIR).is_dir()
    for lib in driver_files.LIBRARIES:
        for lib_dir, bits in ((driver_files.LIB64_DIR, 64), (driver_files.LIB32_DIR, 32)):
            if bits == 32 and not (has32 and lib.has_32bit):
                assert not (root / lib_dir / lib.file_name(V)).exists()
                continue
            path = root / lib_dir / lib.file_name(V)
            elf = read_elf_library(str(path))
            assert elf.soname == lib.soname(V) and elf.is_64bit == (bits == 64), path
            link = root / lib_dir / lib.soname(V)
            assert link.resolve() == path.resolve()
            # ldconfig -r wrote root-relative paths, like a containerized driver's cache
            assert (lib.soname(V), f"/{lib_dir}/{lib.soname(V)}", bits == 64) in cache, lib.name
    assert os.readlink(root / driver_files.LIB64_DIR / "libcuda.so") == "libcuda.so.1"


def test_binaries_firmware_socket_and_kernel_files(host):
    root, inv, majors = host
    for name in driver_files.BINARIES:
        assert os.access(root / "usr/bin" / name, os.X_OK)
    tool = subprocess.run([str(root / "usr/bin/nvidia-persistenced")], capture_output=True, text=True)
    assert tool.returncode == 0 and V in tool.stdout
    assert not has_interpreter(root / "usr/bin/nvidia-smi")     # static: runs in any rootfs
    assert has_interpreter(Path(shutil.which("ls")).resolve())  # the check itself tells dynamic from static
    for fw in driver_files.GSP_FIRMWARE:
        assert (root / "lib/firmware/nvidia" / V / fw).stat().st_size > 0
    assert stat.S_ISSOCK((root / "var/run/nvidia-persistenced/socket").stat().st_mode)
    assert (root / "proc/driver/nvidia/version").read_text().startswith(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {V}")
    for gpu in inv["gpus"]:
        info = (root / f"proc/driver/nvidia/gpus/0000:{gpu['pci_bus_id'][9:].lower()}/information").read_text()
        assert f"GPU UUID: \t {gpu['uuid']}" in info
    assert f"{majors['nvidia-uvm']} nvidia-uvm" in (root / "proc/devices").read_text()
    assert (root / "sys/module/nvidia/version").read_text() == f"{V}\n"


def test_nvidia_smi_list_and_query(host):
    root, inv, _ = host
    smi = str(root / "usr/bin/nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True)
    g0, g1 = inv["gpus"]
    m0, m1 = g1["mig_devices"]
    assert listed.returncode == 0 and listed.stdout == (
        f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {g0['uuid']})\n"
        f"GPU 1: NVIDIA A100-SXM4-40GB (UUID: {g1['uuid']})\n"
        f"  MIG 3g.20gb     Device  0: (UUID: {m0['uuid']})\n"
        f"  MIG 1g.5gb      Device  1: (UUID: {m1['uuid']})\n")
    query = subprocess.run([smi, "--query-gpu=index,uuid,pci.bus_id,memory.total,mig.mode.current", "--format=csv"],
                           capture_output=True, text=True)
    assert query.stdout.splitlines() == [
        "index, uuid, pci.bus_id, memory.total [MiB], mig.mode.current",
        f"0, {g0['uuid']}, {g0['pci_bus_id']}, 40960 MiB, Disabled",
        f"1, {g1['uuid']}, {g1['pci_bus_id']}, 40960 MiB, Enabled"]
    bare = subprocess.run([smi, "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True)
    assert bare.stdout.split() == [g0["uuid"], g1["uuid"]]
    version = subprocess.run([smi, "--version"], capture_output=True, text=True)
    assert f"DRIVER version      : {V}" in version.stdout and "CUDA Version        : 12.4" in version.stdout
    full = subprocess.run([smi, "-q"], capture_output=True, text=True).stdout
    assert re.search(rf"^Driver Version +: {V}$", full, re.M) and re.search(r"^Attached GPUs +: 2$", full, re.M)
    assert re.findall(r"^    GPU UUID +: (\S+)$", full, re.M) == [g0["uuid"], g1["uuid"]]
    assert re.findall(r"^        Current +: (\w+)$", full, re.M) == ["Disabled", "Enabled"]
    assert re.findall(r"^            UUID +: (\S+)$", full, re.M) == [m0["uuid"], m1["uuid"]]
    bad = subprocess.run([smi, "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Invalid combination of input arguments" in bad.stderr
    bad_field = subprocess.run([smi, "--query-gpu=nope", "--format=csv"], capture_output=True, text=True)
    assert bad_field.returncode == 2 and 'Field "nope" is not a valid field to query.' in bad_field.stderr


def test_nvidia_smi_summary_table(host):
    root, inv, _ = host
    done = subprocess.run([str(root / "usr/bin/nvidia-smi")], capture_output=True, text=True)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    table = [line for line in lines[1:] if line.strip()]
    assert all(len(line) == 91 for line in table), [line for line in table if len(line) != 91]
    assert re.search(rf"\| NVIDIA-SMI {V} +Driver Version: {V} +CUDA Version: 12\.4 +\|", done.stdout)
    for gpu in inv["gpus"]:
        assert re.search(rf"^\| +{gpu['index']}  NVIDIA A100-SXM4-40GB +On  \| +{gpu['pci_bus_id']} Off \|",
                         done.stdout, re.M)
    assert re.findall(r"\| +(Enabled|Disabled) \|$", done.stdout, re.M) == ["Disabled", "Enabled"]
    assert "| MIG devices:" in done.stdout
    mig_rows = re.findall(r"^\| +(\d+) +(\d+) +(\d+) +(\d+)  \| +0MiB / (\d+)MiB", done.stdout, re.M)
    assert mig_rows == [("1", "1", "0", "0", "19968"), ("1", "11", "0", "1", "4864")]
    assert "No running processes found" in done.stdout


def test_info_shows_every_uuid_in_every_format(host):
    root, inv, _ = host
    uuids = [g["uuid"] for g in inv["gpus"]] + [m["uuid"] for g in inv["gpus"] for m in g["mig_devices"]]
    table = ctk("info", "--driver-root", str(root))
    assert table.returncode == 0, table.stderr
    assert f"Driver root:    {root} (simulated host)" in table.stdout and "CUDA version:   12.4" in table.stdout
    assert all(u in table.stdout for u in uuids)
    m0 = inv["gpus"][1]["mig_devices"][0]
    assert re.search(rf"^1:0 +{m0['gi']} +0 +3g\.20gb +{m0['uuid']} +{m0['gi_cap_minor']}/{m0['ci_cap_minor']}$",
                     table.stdout, re.M)

    as_json = json.loads(ctk("info", "--format", "json", env={"NVIDIA_CTK_DRIVER_ROOT": str(root)}).stdout)
    assert as_json["simulated"] is True and as_json["driver_version"] == V
    assert [g["uuid"] for g in as_json["gpus"]] == [g["uuid"] for g in inv["gpus"]]
    assert [m["uuid"] for m in as_json["gpus"][1]["mig_devices"]] == [m["uuid"] for m in inv["gpus"][1]["mig_devices"]]

    rows = list(csv.DictReader(io.StringIO(ctk("info", "--driver-root", str(root), "--format", "csv").stdout)))
    assert [(r["kind"], r["gpu"], r["mig"], r["uuid"]) for r in rows] == [
        ("gpu", "0", "", uuids[0]), ("gpu", "1", "", uuids[1]), ("mig", "1", "0", uuids[2]), ("mig", "1", "1", uuids[3])]
    assert rows[2]["profile"] == "3g.20gb" and rows[2]["gi_cap_minor"] == str(m0["gi_cap_minor"])


def test_force_replaces_a_host_and_a_failed_build_leaves_nothing(host, tmp_path):
    target = tmp_path / "h"
    assert ctk("simulate", "create", str(target), "--gpus", "1").returncode == 0
    first = json.loads((target / ".nvidia-simulated-host.json").read_text())["inventory"]
    done = ctk("simulate", "create", str(target), "--gpus", "3", "--force")
    assert done.returncode == 0, done.stderr
    again = json.loads((target / ".nvidia-simulated-host.json").read_text())["inventory"]
    assert len(first["gpus"]) == 1 and len(again["gpus"]) == 3
    assert again["gpus"][0]["uuid"] == first["gpus"][0]["uuid"]     # same place, same UUIDs

    broken = tmp_path / "broken"
    failed = ctk("simulate", "create", str(broken), env={"CC": "false"})
    assert failed.returncode == 1 and failed.stderr.startswith("nvidia-ctk: error: building ")
    assert len(failed.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["h"]      # no target, no staging directory


def test_without_cap_mknod_the_error_names_the_device_node(tmp_path):
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv")
    # uid 0 without CAP_MKNOD in its bounding set: the checkout may sit where only root can read it
    target = tmp_path / "h"
    done = subprocess.run(["setpriv", "--bounding-set=-mknod", "--inh-caps=-all",
                           sys.executable, "-m", "ctk.main", "simulate", "create", str(target)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1
    assert done.stderr == f"nvidia-ctk: error: making device nodes needs root (CAP_MKNOD) ({target}/dev/nvidiactl)\n"
    assert os.listdir(tmp_path) == []


def test_simulate_exec_shows_the_host_at_the_real_paths_in_a_private_namespace(host):
    """What NVIDIA's tools read at fixed paths (/dev/nvidia*, /dev/dri, /proc/driver/nvidia-caps/mig-minors,
    /sys/bus/pci/devices/<bus>/drm) and libnvidia-ml.so.1 by name (pynvml), inside `simulate exec`;
    the host's own /dev, /proc/driver and mount table stay as they were."""
    root, inv, majors = host
    bus = inv["gpus"][0]["pci_bus_id"][4:].lower()
    script = ("ls /dev/dri; stat -c '%t:%T' /dev/nvidia0; head -1 /proc/driver/nvidia-caps/mig-minors; "
              f"ls /sys/bus/pci/devices/{bus}/drm; cat /sys/bus/pci/devices/{bus}/vendor; test -c /dev/null && "
              "echo null-ok; nvidia-smi -L | head -1; " + sys.executable +
              " -c 'import pynvml; pynvml.nvmlInit(); print(\"nvml\", pynvml.nvmlDeviceGetCount())'")

    def host_view():
        with open("/proc/self/mountinfo") as f:
            mounts = sorted(line.split()[4] for line in f)
        return mounts, sorted(os.listdir("/dev")), sorted(os.listdir("/proc/driver"))

    before = host_view()
    done = ctk("simulate", "exec", str(root), "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == ["card1", "card2", "renderD128", "renderD129"]
    assert lines[4] == f"{majors['nvidia']:x}:0"
    assert lines[5] == "config 1"
    assert lines[6:8] == ["card1", "renderD128"] and lines[8] == "0x10de" and lines[9] == "null-ok"
    assert lines[10].startswith("GPU 0: NVIDIA A100-SXM4-40GB") and lines[11] == "nvml 2"
    assert host_view() == before
    # only through unshare: run directly, it refuses to touch the caller's namespace
    direct = subprocess.run([sys.executable, "-m", "simulator.namespace", str(root), "--", "true"],
                            capture_output=True, text=True)
    assert direct.returncode == 1 and "refusing to change the mount namespace" in direct.stderr
    assert host_view() == before
    missing = ctk("simulate", "exec", str(root.parent), "--", "true")
    assert missing.returncode == 1 and "not a simulated host" in missing.stderr
