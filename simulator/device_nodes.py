"""Device nodes of a simulated host, on majors that no loaded driver owns.

Opening a node whose major belongs to a live driver talks to that driver (on some machines one of
the dynamic majors is the watchdog, which arms when opened). So every major is checked against
/proc/devices: nvidia* keep the real 195 when it is free (a driverless 195:x opens with ENXIO, which
device-cgroup tests rely on), the DRM nodes (/dev/dri/card<N>, renderD<N>) the real 226 likewise;
nvidia-uvm, nvidia-caps and nvidia-caps-imex-channels (and 195 or 226 when a driver has them) take majors
from the ranges reserved for local use that the kernel never hands out dynamically (120-127, then 60-63).
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from simulator.host_spec import SimHost, SimulatorError

NVIDIA_MAJOR = 195
DRM_MAJOR = 226
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
CONFIG_CAP_MINOR = 1
MONITOR_CAP_MINOR = 2
_LOCAL_MAJORS = tuple(range(120, 128)) + tuple(range(60, 64))


@dataclass(frozen=True)
class Majors:
    nvidia: int
    uvm: int
    caps: int
    imex: int
    drm: int = DRM_MAJOR


def used_char_majors(proc_devices: str = "/proc/devices") -> set[int]:
    used: set[int] = set()
    in_char = False
    with open(proc_devices) as f:
        for line in f:
            line = line.strip()
            if line.endswith("devices:"):
                in_char = line.startswith("Character")
                continue
            if in_char and line:
                used.add(int(line.split()[0]))
    return used


def choose_majors(used: set[int]) -> Majors:
    free = [m for m in _LOCAL_MAJORS if m not in used]
    nvidia = NVIDIA_MAJOR if NVIDIA_MAJOR not in used else (free.pop(0) if free else None)
    drm = DRM_MAJOR if DRM_MAJOR not in used else (free.pop(0) if free else None)
    if nvidia is None or drm is None or len(free) < 3:
        raise SimulatorError("no free character device majors for the simulated driver", "/proc/devices")
    return Majors(nvidia=nvidia, uvm=free[0], caps=free[1], imex=free[2], drm=drm)


def drm_names(gpu_index: int) -> tuple[str, str]:
    """The DRM nodes of a GPU, as the real driver numbers them on a machine whose card0 is the
    firmware's framebuffer: card<index+1> and renderD<128+index>."""
    return f"card{gpu_index + 1}", f"renderD{128 + gpu_index}"


def _mknod(path: Path, major: int, minor: int, mode: int) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    except PermissionError:
        raise SimulatorError("making device nodes needs root (CAP_MKNOD)", str(path)) from None
    os.chmod(path, mode)  # mknod honours the umask


def make_device_nodes(root: Path, host: SimHost, majors: Majors) -> None:
    dev = root / "dev"
    caps = dev / "nvidia-caps"
    caps.mkdir(parents=True, exist_ok=True)
    _mknod(dev / "nvidiactl", majors.nvidia, NVIDIACTL_MINOR, 0o666)
    _mknod(dev / "nvidia-modeset", majors.nvidia, MODESET_MINOR, 0o666)
    _mknod(dev / "nvidia-uvm", majors.uvm, 0, 0o666)
    _mknod(dev / "nvidia-uvm-tools", majors.uvm, 1, 0o666)
    _mknod(caps / f"nvidia-cap{CONFIG_CAP_MINOR}", majors.caps, CONFIG_CAP_MINOR, 0o400)
    _mknod(caps / f"nvidia-cap{MONITOR_CAP_MINOR}", majors.caps, MONITOR_CAP_MINOR, 0o444)
    (dev / "dri").mkdir()
    for gpu in host.gpus:
        _mknod(dev / f"nvidia{gpu.minor}", majors.nvidia, gpu.minor, 0o666)
        card, render = drm_names(gpu.index)
        _mknod(dev / "dri" / card, majors.drm, gpu.index + 1, 0o660)
        _mknod(dev / "dri" / render, majors.drm, 128 + gpu.index, 0o666)
        for mig in gpu.migs:
            for minor in (mig.gi_cap_minor, mig.ci_cap_minor):
                _mknod(caps / f"nvidia-cap{minor}", majors.caps, minor, 0o444)
    if host.imex_channels:
        channels = dev / "nvidia-caps-imex-channels"
        channels.mkdir()
        for channel in range(host.imex_channels):
            _mknod(channels / f"channel{channel}", majors.imex, channel, 0o666)
    _check_nodes_reach_no_driver(dev / "nvidiactl")


def _check_nodes_reach_no_driver(node: Path) -> None:
    """The nodes must open with ENXIO: EACCES means a nodev mount, success means a live driver."""
    try:
        fd = os.open(node, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return
        if exc.errno == errno.EACCES:
            raise SimulatorError("device nodes cannot be opened here (is the file system mounted nodev?)",
                                 str(node)) from None
        raise SimulatorError(f"device node check failed: {exc.strerror}", str(node)) from None
    os.close(fd)
    raise SimulatorError("a loaded driver answers on the simulated nvidia major; refusing to use it", str(node))
