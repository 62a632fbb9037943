"""What the driver reports: the GPUs and MIG devices of a host (or of a container's view of it).

Plain data, filled by cdi.nvml (through cdi.nvml_binding) and consumed by the request resolver, the
NVIDIA_REQUIRE_* checks, discovery and `nvidia-ctk info`. Nothing here talks to the driver.
"""
from __future__ import annotations

from cdi.record import Record, field


class MigDevice(Record, frozen=True):
    parent_index: int    # index of the parent GPU
    index: int           # MIG device index within its parent (0..), as in `<gpu>:<mig>`
    uuid: str            # "MIG-<uuid>"
    gi: int              # GPU instance id
    ci: int              # compute instance id
    profile: str         # e.g. "1g.5gb"
    gi_cap_minor: int    # minor of /dev/nvidia-caps/nvidia-cap<N> for the GPU instance's access file
    ci_cap_minor: int    # the same for the compute instance
    memory_total: int = 0  # bytes


class Gpu(Record, frozen=True):
    index: int                 # NVML index, 0..n-1 as this process sees them
    minor: int                 # /dev/nvidia<minor>
    uuid: str                  # "GPU-<uuid>"
    name: str                  # e.g. "NVIDIA A100-SXM4-40GB"
    brand: str                 # e.g. "Nvidia", "Tesla" (NVML brand names without the prefix)
    pci_bus_id: str            # "00000000:07:00.0"
    architecture: str          # e.g. "Ampere"
    compute_capability: str    # e.g. "8.0"
    memory_total: int = 0      # bytes
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = field(default_factory=tuple)


class Inventory(Record, frozen=True):
    driver_version: str        # e.g. "550.54.15"
    cuda_version: str          # e.g. "12.4"
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)

    def gpu_by_index(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def mig_devices(self) -> list[MigDevice]:
        return [m for g in self.gpus for m in g.mig_devices]

    def all_devices(self) -> list[Gpu | MigDevice]:
        """What `all` means, in every mode and in a generated spec: every GPU not in MIG mode, then
        every MIG device. A GPU in MIG mode is used through its MIG devices (which bring its
        /dev/nvidia<minor> along); by itself it runs no CUDA work, so it is not a device of its own
        here (as in NVIDIA's CDI specs). It can still be named by index, UUID or bus id."""
        return [g for g in self.gpus if not g.mig_enabled] + self.mig_devices()
