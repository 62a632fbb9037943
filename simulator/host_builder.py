"""Build a simulated GPU host: a driver root that every component treats like a real driver install.

The host is built in a sibling staging directory and renamed into place at the end, so a failure
leaves nothing behind. Layout (relative to the root):

    .nvidia-simulated-host.json        marker + inventory (a driver root with it supplies dev/proc/sys)
    usr/lib/x86_64-linux-gnu/          libnvidia-ml.so.<v> (real NVML) and every other driver library
    usr/lib/i386-linux-gnu/            32-bit libraries, when the compiler can make them
    usr/bin/                           nvidia-smi (static, real NVML inside), the helper programs, the simulated
                                       MPS (nvidia-cuda-mps-control) and its CUDA client gct-cuda-mps-client
    lib/firmware/nvidia/<v>/           GSP firmware
    etc/ld.so.cache                    made by the real `ldconfig -r <root>`, so its paths are root-relative
    run/nvidia-persistenced/socket     a bound unix socket (var/run -> ../run)
    run/nvidia-simulated-host/         XID events and lost GPUs (simulator.host_state)
    dev/, proc/, sys/                  device nodes and what the kernel module would show
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from simulator import device_nodes, native_build
from simulator.driver_files import (BIN_DIR, BINARIES, DEV_SYMLINKS, GSP_FIRMWARE, LIB32_DIR, LIB64_DIR,
                                    LIBRARIES, MPS_BINARIES)
from simulator.host_spec import MARKER_NAME, SimHost, SimulatorError, build_host_spec
from simulator.host_state import make_state_dir
from simulator.kernel_files import kernel_files

MARKER_FORMAT = 1


def create_simulated_host(directory: str | os.PathLike, *, gpus: int, model: str, driver_version: str,
                          cuda_version: str, mig_options: list[str] | tuple[str, ...] = (),
                          imex_channels: int = 0, force: bool = False, pcie_options: list[str] | tuple[str, ...] = (),
                          nvlink_options: list[str] | tuple[str, ...] = ()) -> SimHost:
    target = Path(os.path.abspath(directory))
    if target == Path("/"):
        raise SimulatorError("refusing to build a simulated host over /", str(target))
    replace = _check_target(target, force)
    host = build_host_spec(str(target), gpus, model, driver_version, cuda_version, mig_options, imex_channels,
                           pcie_options, nvlink_options)
    majors = device_nodes.choose_majors(device_nodes.used_char_majors())
    native_build.compiler()  # fail before creating anything when there is no compiler

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        os.chmod(staging, 0o755)
        _populate(staging, host, majors)
        if replace:
            shutil.rmtree(target)
        elif target.exists():
            target.rmdir()
        os.rename(staging, target)
    except SimulatorError as e:
        shutil.rmtree(staging, ignore_errors=True)
        # name the paths the user asked for, not the staging directory they never saw
        raise SimulatorError(e.what, e.where.replace(str(staging), str(target))) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return host


def _check_target(target: Path, force: bool) -> bool:
    """True when an existing simulated host is to be replaced."""
    if not target.exists():
        return False
    if not target.is_dir():
        raise SimulatorError("exists and is not a directory", str(target))
    if not any(target.iterdir()):
        return False
    if not (target / MARKER_NAME).exists():
        raise SimulatorError("directory is not empty and is not a simulated host", str(target))
    if not force:
        raise SimulatorError("a simulated host already exists here (use --force to replace it)", str(target))
    return True


def _populate(root: Path, host: SimHost, majors: device_nodes.Majors) -> None:
    version = host.driver_version
    lib64, lib32, bindir = root / LIB64_DIR, root / LIB32_DIR, root / BIN_DIR
    for d in (lib64, bindir, root / "etc/ld.so.conf.d", root / "run/nvidia-persistenced",
              root / "var", root / "lib/firmware/nvidia" / version):
        d.mkdir(parents=True, exist_ok=True)
    (root / "var/run").symlink_to("../run")

    with tempfile.TemporaryDirectory(prefix="nvsim-build-") as build:
        build_dir = Path(build)
        inventory = native_build.write_inventory_source(host, build_dir)
        others = [lib for lib in LIBRARIES if lib.name != "libnvidia-ml"]
        libs32 = [lib for lib in LIBRARIES if lib.has_32bit]
        with_32bit = native_build.can_build_32bit(build_dir)
        if with_32bit:
            lib32.mkdir(parents=True)
        # the compiler runs are independent: run them side by side (creation time matters to test suites)
        with ThreadPoolExecutor(max_workers=5) as pool:
            jobs = [pool.submit(native_build.build_nvml_library, inventory, lib64 / f"libnvidia-ml.so.{version}"),
                    pool.submit(native_build.build_nvidia_smi, inventory, bindir / "nvidia-smi"),
                    pool.submit(native_build.build_driver_tool, version, build_dir / "driver-tool"),
                    pool.submit(native_build.build_mps_programs, bindir),
                    pool.submit(native_build.build_driver_libraries, others, host, build_dir, lib64, 64)]
            if with_32bit:
                jobs.append(pool.submit(native_build.build_driver_libraries, libs32, host, build_dir, lib32, 32))
            for job in jobs:
                job.result()    # re-raises the first failure
        _soname_links(lib64, LIBRARIES, version)
        for link, target in DEV_SYMLINKS.items():
            (lib64 / link).symlink_to(target)
        if with_32bit:
            _soname_links(lib32, libs32, version)
        for name in BINARIES[1:]:
            if name in MPS_BINARIES:
                continue
            shutil.copy2(build_dir / "driver-tool", bindir / name)

    for name in GSP_FIRMWARE:
        (root / "lib/firmware/nvidia" / version / name).write_bytes(
            b"NVGSP\0" + f"simulated GSP firmware {version} {name}\n".encode())
    proc_devices = Path("/proc/devices").read_text()
    for rel, content in kernel_files(host, majors, proc_devices).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    device_nodes.make_device_nodes(root, host, majors)
    _bind_socket(root / "run/nvidia-persistenced", "socket")
    make_state_dir(root)
    _make_ld_cache(root)
    marker = {"simulated_host": True, "format": MARKER_FORMAT, "created_by": "nvidia-ctk simulate create",
              "majors": {"nvidia": majors.nvidia, "nvidia-uvm": majors.uvm, "nvidia-caps": majors.caps,
                         "nvidia-caps-imex-channels": majors.imex, "drm": majors.drm},
              "inventory": host.to_json()}
    (root / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n")


def _soname_links(lib_dir: Path, libraries, version: str) -> None:
    for lib in libraries:
        soname, file_name = lib.soname(version), lib.file_name(version)
        if soname != file_name:
            (lib_dir / soname).symlink_to(file_name)


def _bind_socket(directory: Path, name: str) -> None:
    """Leave a bound unix socket file, as nvidia-persistenced does. The address goes through the
    directory's descriptor, so a long root path cannot exceed the 108-byte socket path limit."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(f"/proc/self/fd/{dir_fd}/{name}")
    finally:
        os.close(dir_fd)


def _make_ld_cache(root: Path) -> None:
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text(f"/{LIB64_DIR}\n")
    if (root / LIB32_DIR).is_dir():
        (root / "etc/ld.so.conf.d/i386-linux-gnu.conf").write_text(f"/{LIB32_DIR}\n")
    ldconfig = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if not ldconfig:
        raise SimulatorError("ldconfig not found", "PATH")
    # -r chroots into the root, so the cache lists root-relative paths, like a containerized driver's.
    done = subprocess.run([ldconfig, "-r", str(root)], capture_output=True, text=True)
    if done.returncode != 0 or not (root / "etc/ld.so.cache").exists():
        detail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no cache written"
        raise SimulatorError(f"ldconfig failed: {detail}", ldconfig)
