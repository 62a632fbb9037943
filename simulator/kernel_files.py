"""What the kernel module would show under /proc and /sys, as files inside a simulated host.

Formats follow the real nvidia.ko: /proc/driver/nvidia/{version,params,registry}, one `information`
file per GPU, MIG capability files and /proc/driver/nvidia-caps/mig-minors with the real minor layout
(every GPU instance 0..14 and compute instance 0..7 of every GPU, present or not, as the driver lists
them), /proc/devices with the driver's majors, and the /sys module and PCI entries (with each GPU's
DRM nodes under drm/).
"""
from __future__ import annotations

from simulator.device_nodes import CONFIG_CAP_MINOR, MONITOR_CAP_MINOR, Majors, drm_names
from simulator.host_spec import SimHost, ci_cap_minor, gi_cap_minor

MAX_GI = 15
MAX_CI = 8
_CAP_FILE = "DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"

_PARAMS = """ResmanDebugLevel: 4294967295
RmLogonRC: 1
ModifyDeviceFiles: 1
DeviceFileUID: 0
DeviceFileGID: 0
DeviceFileMode: 438
InitializeSystemMemoryAllocations: 1
UsePageAttributeTable: 4294967295
EnableMSI: 1
EnablePCIeGen3: 0
MemoryPoolSize: 0
KMallocHeapMaxSize: 0
VMallocHeapMaxSize: 0
IgnoreMMIOCheck: 0
EnableStreamMemOPs: 0
EnableUserNUMAManagement: 1
NvLinkDisable: 0
RmProfilingAdminOnly: 1
PreserveVideoMemoryAllocations: 0
DynamicPowerManagement: 3
RegisterPCIDriver: 1
EnableGpuFirmware: 18
EnableGpuFirmwareLogs: 2
RegistryDwords: ""
RegistryDwordsPerDevice: ""
RmMsg: ""
GpuBlacklist: ""
TemporaryFilePath: ""
ExcludedGpus: ""
"""


def mig_minors_text(host: SimHost) -> str:
    lines = [f"config {CONFIG_CAP_MINOR}", f"monitor {MONITOR_CAP_MINOR}"]
    for gpu in host.gpus:
        for gi in range(MAX_GI):
            lines.append(f"gpu{gpu.minor}/gi{gi}/access {gi_cap_minor(gpu.minor, gi)}")
            for ci in range(MAX_CI):
                lines.append(f"gpu{gpu.minor}/gi{gi}/ci{ci}/access {ci_cap_minor(gpu.minor, gi, ci)}")
    return "\n".join(lines) + "\n"


def proc_devices_text(host_proc_devices: str, majors: Majors) -> str:
    """The host's /proc/devices plus the simulated driver's character majors."""
    char, block, section = [], [], None
    for line in host_proc_devices.splitlines():
        if line.startswith("Character"):
            section = char
        elif line.startswith("Block"):
            section = block
        elif line.strip() and section is not None:
            section.append(line)
    for major, name in ((majors.nvidia, "nvidia-frontend"), (majors.uvm, "nvidia-uvm"),
                        (majors.caps, "nvidia-caps"), (majors.imex, "nvidia-caps-imex-channels"),
                        (majors.drm, "drm")):
        char.append(f"{major:3d} {name}")
    char.sort(key=lambda entry: int(entry.split()[0]))
    return "Character devices:\n" + "\n".join(char) + "\n\nBlock devices:\n" + "\n".join(block) + "\n"


def kernel_files(host: SimHost, majors: Majors, host_proc_devices: str) -> dict[str, str]:
    """Relative path inside the driver root -> file content."""
    version = host.driver_version
    files = {
        "proc/driver/nvidia/version":
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  (simulated host, no GPU)\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        "proc/driver/nvidia/params": _PARAMS,
        "proc/driver/nvidia/registry": 'Binary: ""\n',
        "proc/driver/nvidia-caps/mig-minors": mig_minors_text(host),
        "proc/driver/nvidia/capabilities/mig/config": _CAP_FILE.format(minor=CONFIG_CAP_MINOR, mode=256),
        "proc/driver/nvidia/capabilities/mig/monitor": _CAP_FILE.format(minor=MONITOR_CAP_MINOR, mode=292),
        "proc/devices": proc_devices_text(host_proc_devices, majors),
        "sys/module/nvidia/version": f"{version}\n",
        "sys/module/nvidia_uvm/version": f"{version}\n",
        "sys/module/nvidia_modeset/version": f"{version}\n",
    }
    for gpu in host.gpus:
        files[f"proc/driver/nvidia/gpus/{gpu.proc_bus_id}/information"] = (
            f"Model: \t\t {gpu.model.name}\n"
            "IRQ:   \t\t 0\n"
            f"GPU UUID: \t {gpu.uuid}\n"
            "Video BIOS: \t 92.00.25.00.08\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 47 bits\n"
            "DMA Mask: \t 0x7fffffffffff\n"
            f"Bus Location: \t {gpu.proc_bus_id}\n"
            f"Device Minor: \t {gpu.minor}\n"
            "GPU Excluded:\t No\n")
        for mig in gpu.migs:
            base = f"proc/driver/nvidia/capabilities/gpu{gpu.minor}/mig/gi{mig.gi}"
            files[f"{base}/access"] = _CAP_FILE.format(minor=mig.gi_cap_minor, mode=292)
            files[f"{base}/ci{mig.ci}/access"] = _CAP_FILE.format(minor=mig.ci_cap_minor, mode=292)
        pci = f"sys/bus/pci/devices/{gpu.proc_bus_id}"
        files[f"{pci}/vendor"] = "0x10de\n"
        files[f"{pci}/device"] = f"0x{gpu.model.pci_device:04x}\n"
        files[f"{pci}/class"] = "0x030200\n"
        files[f"{pci}/numa_node"] = f"{0 if gpu.index < max(1, len(host.gpus) // 2) else 1}\n"
        # the GPU's DRM nodes, as the drm class lists them under its PCI device (what finds /dev/dri/*)
        for name, minor in zip(drm_names(gpu.index), (gpu.index + 1, 128 + gpu.index)):
            files[f"{pci}/drm/{name}/dev"] = f"{majors.drm}:{minor}\n"
    return files
