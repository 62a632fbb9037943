"""The GPU models a simulated host can have, with their real MIG profiles.

Profile ids, names, slice counts and placements are those real A100, H100 and A30 drivers report
(`nvidia-smi mig -lgip` / `-lgipp`); memory sizes and engine counts are close to the real ones.
"""
from __future__ import annotations

from dataclasses import dataclass

# nvmlBrandType_t and nvmlDeviceArchitecture_t values
BRAND_TESLA = 2
BRAND_NVIDIA = 14
ARCH_VOLTA, ARCH_TURING, ARCH_AMPERE, ARCH_ADA, ARCH_HOPPER = 5, 6, 7, 8, 9


@dataclass(frozen=True)
class MigProfile:
    index: int              # NVML_GPU_INSTANCE_PROFILE_* (what the ProfileInfo calls take)
    id: int                 # profile id (what GPU instance info reports)
    name: str               # "1g.5gb"
    slices: int             # compute slices
    instance_count: int     # how many fit on one GPU
    starts: tuple[int, ...] # allowed placement starts, in memory slots
    size: int               # memory slots a placement takes
    multiprocessors: int
    memory_mb: int
    copy_engines: int = 1
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0


@dataclass(frozen=True)
class GpuModel:
    name: str
    brand: int
    architecture: int
    compute_capability: tuple[int, int]
    memory_mb: int
    multiprocessors: int
    pci_device: int          # PCI device id (the vendor is always 0x10de)
    pci_subsystem: int
    power_limit_w: int
    mig_slices: int = 0      # compute slices of a MIG-capable GPU; 0 = no MIG
    mig_slots: int = 0       # memory slots (placement units)
    mig_profiles: tuple[MigProfile, ...] = ()
    nvlinks: int = 0         # NVLinks the GPU has (NVML links 0..nvlinks-1); 0 = no NVLink

    @property
    def mig_capable(self) -> bool:
        return self.mig_slices > 0

    def profile(self, name_or_id: str) -> MigProfile | None:
        """A profile by name ("3g.20gb") or by profile id ("9"), as `nvidia-smi mig -cgi` accepts."""
        for p in self.mig_profiles:
            if p.name == name_or_id or (name_or_id.isdigit() and p.id == int(name_or_id)):
                return p
        return None


def _seven_slice_profiles(unit_gb: int, unit_mb: int, sms: tuple[int, int, int, int, int]) -> tuple[MigProfile, ...]:
    """The profile family of A100/H100: 7 compute slices over 8 memory slots."""
    sm1, sm2, sm3, sm4, sm7 = sms
    g = unit_gb
    return (
        MigProfile(0, 19, f"1g.{g}gb", 1, 7, tuple(range(7)), 1, sm1, unit_mb),
        MigProfile(7, 20, f"1g.{g}gb+me", 1, 1, tuple(range(7)), 1, sm1, unit_mb, 1, 1, 0, 1, 1),
        MigProfile(9, 15, f"1g.{2 * g}gb", 1, 4, (0, 2, 4, 6), 2, sm1, 2 * unit_mb + 128, 1, 1, 0, 0, 0),
        MigProfile(1, 14, f"2g.{2 * g}gb", 2, 3, (0, 2, 4), 2, sm2, 2 * unit_mb + 128, 2, 1, 0, 0, 0),
        MigProfile(2, 9, f"3g.{4 * g}gb", 3, 2, (0, 4), 4, sm3, 4 * unit_mb + 512, 3, 2, 0, 0, 0),
        MigProfile(3, 5, f"4g.{4 * g}gb", 4, 1, (0,), 4, sm4, 4 * unit_mb + 512, 4, 2, 0, 0, 0),
        MigProfile(4, 0, f"7g.{8 * g}gb", 7, 1, (0,), 8, sm7, 8 * unit_mb + 1280, 7, 5, 0, 1, 1),
    )


_A30_PROFILES = (
    MigProfile(0, 19, "1g.6gb", 1, 4, (0, 1, 2, 3), 1, 14, 5836, 1, 1, 0, 1, 0),
    MigProfile(7, 20, "1g.6gb+me", 1, 1, (0, 1, 2, 3), 1, 14, 5836, 1, 1, 1, 1, 1),
    MigProfile(1, 14, "2g.12gb", 2, 2, (0, 2), 2, 28, 11904, 2, 2, 0, 2, 0),
    MigProfile(8, 21, "2g.12gb+me", 2, 1, (0, 2), 2, 28, 11904, 2, 2, 1, 2, 1),
    MigProfile(3, 5, "4g.24gb", 4, 1, (0,), 4, 56, 24064, 4, 4, 1, 4, 1),
)

MODELS: tuple[GpuModel, ...] = (
    GpuModel("NVIDIA A100-SXM4-40GB", BRAND_NVIDIA, ARCH_AMPERE, (8, 0), 40960, 108, 0x20B0, 0x134F10DE, 400,
             7, 8, _seven_slice_profiles(5, 4864, (14, 28, 42, 56, 98)), nvlinks=12),
    GpuModel("NVIDIA A100-SXM4-80GB", BRAND_NVIDIA, ARCH_AMPERE, (8, 0), 81920, 108, 0x20B2, 0x147F10DE, 400,
             7, 8, _seven_slice_profiles(10, 9856, (14, 28, 42, 56, 98)), nvlinks=12),
    GpuModel("NVIDIA H100 80GB HBM3", BRAND_NVIDIA, ARCH_HOPPER, (9, 0), 81559, 132, 0x2330, 0x16C110DE, 700,
             7, 8, _seven_slice_profiles(10, 9856, (16, 32, 60, 64, 132)), nvlinks=18),
    GpuModel("NVIDIA A30", BRAND_NVIDIA, ARCH_AMPERE, (8, 0), 24576, 56, 0x20B7, 0x153210DE, 165,
             4, 4, _A30_PROFILES, nvlinks=4),
    GpuModel("NVIDIA L4", BRAND_NVIDIA, ARCH_ADA, (8, 9), 23034, 58, 0x27B8, 0x16CA10DE, 72),
    GpuModel("Tesla T4", BRAND_TESLA, ARCH_TURING, (7, 5), 15360, 40, 0x1EB8, 0x12A210DE, 70),
    GpuModel("Tesla V100-SXM2-16GB", BRAND_TESLA, ARCH_VOLTA, (7, 0), 16384, 80, 0x1DB1, 0x121210DE, 300,
             nvlinks=6),
)

DEFAULT_MODEL = MODELS[0].name


def find_model(name: str) -> GpuModel | None:
    """A model by its full name or without the "NVIDIA "/"Tesla " prefix, case-insensitively."""
    wanted = name.strip().lower()
    for model in MODELS:
        full = model.name.lower()
        if wanted in (full, full.removeprefix("nvidia "), full.removeprefix("tesla ")):
            return model
    return None
