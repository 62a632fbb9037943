"""What a simulated host contains: its GPUs and MIG devices, decided once from the user's options.

The same description is compiled into libnvidia-ml.so.1, written to the driver root's proc files and
stored in the marker file, so every view of the host agrees.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from simulator.models import DEFAULT_MODEL, MODELS, GpuModel, MigProfile, find_model
from simulator.topology_spec import HostTopology, TopologyError, build_topology

MAX_GPUS = 16
MAX_MIG_DEVICES = 7
MAX_IMEX_CHANNELS = 2048   # the driver's default NVreg_ImexChannelCount
DEFAULT_GPUS = 2
DEFAULT_DRIVER_VERSION = "550.54.15"
DEFAULT_CUDA_VERSION = "12.4"
# the file in a built host's root that holds this description (and marks the directory as a simulated host)
MARKER_NAME = ".nvidia-simulated-host.json"

# DGX-style PCI bus numbers; beyond eight GPUs the pattern repeats in the next free buses.
_PCI_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD,
              0x17, 0x1F, 0x57, 0x5E, 0x97, 0xA0, 0xC7, 0xCD)


class SimulatorError(Exception):
    """A simulated host cannot be built as asked; `where` names the option or path concerned."""

    def __init__(self, what: str, where: str):
        super().__init__(f"{what} ({where})")
        self.what, self.where = what, where


@dataclass(frozen=True)
class SimMig:
    index: int              # MIG device index within the parent
    uuid: str
    profile: MigProfile
    gi: int
    ci: int
    placement_start: int
    placement_size: int
    gi_cap_minor: int
    ci_cap_minor: int
    ci_slices: int = 0      # compute slices of its one compute instance; 0: all of the GPU instance's

    @property
    def compute_slices(self) -> int:
        return self.ci_slices or self.profile.slices

    @property
    def name(self) -> str:
        """The MIG device's profile as NVML names it: "3g.20gb", or "1c.3g.20gb" for a compute instance
        smaller than its GPU instance."""
        if self.compute_slices == self.profile.slices:
            return self.profile.name
        return f"{self.compute_slices}c.{self.profile.name}"


@dataclass(frozen=True)
class SimGpu:
    index: int
    minor: int
    uuid: str
    model: GpuModel
    pci_bus: int
    mig_enabled: bool = False
    migs: tuple[SimMig, ...] = ()

    @property
    def bus_id(self) -> str:
        """The NVML form, "00000000:07:00.0"."""
        return f"00000000:{self.pci_bus:02X}:00.0"

    @property
    def proc_bus_id(self) -> str:
        """The form /proc/driver/nvidia/gpus and /sys use, "0000:07:00.0"."""
        return f"0000:{self.pci_bus:02x}:00.0"


@dataclass(frozen=True)
class SimHost:
    driver_version: str
    cuda_version: str
    gpus: tuple[SimGpu, ...] = field(default_factory=tuple)
    imex_channels: int = 0     # /dev/nvidia-caps-imex-channels/channel0..N-1
    topology: HostTopology | None = None   # PCIe levels and NVLinks (simulator.topology_spec)

    @property
    def cuda_version_int(self) -> int:
        major, minor = self.cuda_version.split(".")
        return int(major) * 1000 + int(minor) * 10

    def to_json(self) -> dict:
        """The inventory as stored in the marker file."""
        gpus = []
        for g in self.gpus:
            gpus.append({
                "index": g.index, "minor": g.minor, "uuid": g.uuid, "name": g.model.name,
                "pci_bus_id": g.bus_id, "mig_enabled": g.mig_enabled,
                "mig_devices": [{
                    "index": m.index, "uuid": m.uuid, "profile": m.name, "profile_id": m.profile.id,
                    "ci_slices": m.compute_slices, "gi": m.gi, "ci": m.ci, "gi_cap_minor": m.gi_cap_minor, "ci_cap_minor": m.ci_cap_minor,
                    "placement": {"start": m.placement_start, "size": m.placement_size},
                } for m in g.migs],
            })
        data = {"driver_version": self.driver_version, "cuda_version": self.cuda_version,
                "imex_channels": self.imex_channels, "gpus": gpus}
        if self.topology is not None:
            data["topology"] = self.topology.to_json()
        return data


def gi_cap_minor(gpu_minor: int, gi: int) -> int:
    """The capability minor of a GPU instance's access file, as real drivers number them."""
    return 3 + 135 * gpu_minor + 9 * gi


def ci_cap_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_cap_minor(gpu_minor, gi) + 1 + ci


def gi_id_for_placement(model: GpuModel, start: int, size: int) -> int:
    """GPU instance ids follow the placement: largest placements first, then by start (real layout:
    on an A100 7g is GI 0, the 4-slot halves GI 1-2, the 2-slot quarters GI 3-6, 1-slot GI 7-14)."""
    ids, size_now = 0, model.mig_slots
    while size_now > size:
        ids += model.mig_slots // size_now
        size_now //= 2
    return ids + start // size


# the compute instance profiles' sizes (NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE ..._7_SLICE, as the simulated
# library numbers them: csrc/nvml_mig.c)
CI_SLICES = (1, 2, 3, 4, 7)


def compute_slices_of(token: str, profile: MigProfile, where: str) -> int:
    """The compute slices `<C>c.` before a GPU instance profile asks for (its own slices when none): one
    compute instance of C slices in a GPU instance of the profile, as `nvidia-smi mig -cci` makes one."""
    match = re.fullmatch(r"(\d+)c\.", token)
    slices = int(match.group(1)) if match else 0
    if slices not in CI_SLICES or slices > profile.slices or (profile.slices == 4 and slices == 3):
        sizes = [c for c in CI_SLICES if c <= profile.slices and not (profile.slices == 4 and c == 3)]
        raise SimulatorError(f"no compute instance of {token}{profile.name} (a {profile.name} GPU instance "
                             f"takes {', '.join(f'{c}c' for c in sizes)})", where)
    return slices


def parse_mig_options(options: list[str], gpu_count: int, model: GpuModel
                      ) -> dict[int, tuple[str, list[tuple[MigProfile, int]]]]:
    """`--mig GPU=PROFILE[,PROFILE...]` options -> (the option, its (GPU instance profile, compute slices))
    per GPU index, validated. A PROFILE is a GPU instance profile (its name or id), with one compute
    instance spanning it, or `<C>c.<name>` for one compute instance of C slices in it (`1c.3g.20gb`)."""
    result: dict[int, tuple[str, list[tuple[MigProfile, int]]]] = {}
    for option in options:
        where = f"--mig {option}"
        gpu_text, sep, profiles_text = option.partition("=")
        if not sep or not gpu_text.strip().isdigit() or not profiles_text.strip():
            raise SimulatorError("expected GPU=PROFILE[,PROFILE...], e.g. 1=3g.20gb,1g.5gb", where)
        gpu = int(gpu_text)
        if gpu >= gpu_count:
            raise SimulatorError(f"GPU {gpu} does not exist on a host with {gpu_count} GPUs", where)
        if gpu in result:
            raise SimulatorError(f"GPU {gpu} is given twice", where)
        if not model.mig_capable:
            raise SimulatorError(f"{model.name} does not support MIG", where)
        names = [n.strip() for n in profiles_text.split(",")]
        if len(names) > MAX_MIG_DEVICES:
            raise SimulatorError(f"{len(names)} MIG devices asked, at most {MAX_MIG_DEVICES} per GPU", where)
        profiles = []
        for name in names:
            ci_token, gi_name = re.fullmatch(r"(\d+c\.)?(.*)", name).groups()
            profile = model.profile(gi_name)
            if profile is None:
                known = ", ".join(p.name for p in model.mig_profiles)
                raise SimulatorError(f"unknown MIG profile {name!r} for {model.name} (known: {known}; "
                                     "<C>c.<profile> for a smaller compute instance)", where)
            slices = compute_slices_of(ci_token, profile, where) if ci_token else profile.slices
            profiles.append((profile, slices))
        result[gpu] = (where, profiles)
    return result


def place_mig_devices(model: GpuModel, profiles: list[MigProfile], where: str) -> list[tuple[MigProfile, int]]:
    """Give each profile the first free placement, in the order asked; fail if they do not fit."""
    used_slots: set[int] = set()
    slices = 0
    placed: list[tuple[MigProfile, int]] = []
    for profile in profiles:
        if sum(1 for p, _ in placed if p.id == profile.id) >= profile.instance_count:
            count = "one instance" if profile.instance_count == 1 else f"{profile.instance_count} instances"
            raise SimulatorError(f"at most {count} of {profile.name} fit on one GPU", where)
        slices += profile.slices
        start = next((s for s in profile.starts
                      if not used_slots & set(range(s, s + profile.size))), None)
        if start is None or slices > model.mig_slices:
            raise SimulatorError(f"MIG profiles {','.join(p.name for p in profiles)} do not fit on one "
                                 f"{model.name} ({model.mig_slices} compute slices)", where)
        used_slots |= set(range(start, start + profile.size))
        placed.append((profile, start))
    return placed


def _parse_cuda_version(text: str) -> str:
    if not re.fullmatch(r"\d{1,2}\.\d{1,2}", text):
        raise SimulatorError(f"invalid CUDA version {text!r}, expected MAJOR.MINOR such as 12.4", "--cuda-version")
    return text


def build_host_spec(root_key: str, gpus: int = DEFAULT_GPUS, model_name: str = DEFAULT_MODEL,
                    driver_version: str = DEFAULT_DRIVER_VERSION, cuda_version: str = DEFAULT_CUDA_VERSION,
                    mig_options: list[str] | tuple[str, ...] = (), imex_channels: int = 0,
                    pcie_options: list[str] | tuple[str, ...] = (),
                    nvlink_options: list[str] | tuple[str, ...] = ()) -> SimHost:
    """Validate the options and decide every id. `root_key` (the host's absolute path) seeds the
    UUIDs, so a host rebuilt at the same place gets the same UUIDs and two hosts never share them."""
    if not 1 <= gpus <= MAX_GPUS:
        raise SimulatorError(f"{gpus} GPUs asked, a simulated host has 1 to {MAX_GPUS}", "--gpus")
    model = find_model(model_name)
    if model is None:
        known = ", ".join(m.name for m in MODELS)
        raise SimulatorError(f"unknown GPU model {model_name!r} (known: {known})", "--model")
    if not re.fullmatch(r"\d{3}\.\d{1,3}(\.\d{1,3})?", driver_version):
        raise SimulatorError(f"invalid driver version {driver_version!r}, expected e.g. 550.54.15",
                             "--driver-version")
    cuda_version = _parse_cuda_version(cuda_version)
    if not 0 <= imex_channels <= MAX_IMEX_CHANNELS:
        raise SimulatorError(f"{imex_channels} IMEX channels asked, at most {MAX_IMEX_CHANNELS}", "--imex-channels")
    mig = parse_mig_options(list(mig_options), gpus, model)
    try:
        topology = build_topology(gpus, model.nvlinks, pcie_options, nvlink_options)
    except TopologyError as e:
        raise SimulatorError(e.what, e.where) from None

    namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"nvidia-simulated-host:{root_key}")
    result = []
    for index in range(gpus):
        minor = index
        migs = []
        if index in mig:
            where, asked = mig[index]
            placed = place_mig_devices(model, [profile for profile, _ in asked], where)
            for mig_index, ((profile, start), (_, slices)) in enumerate(zip(placed, asked)):
                gi = gi_id_for_placement(model, start, profile.size)
                migs.append(SimMig(
                    index=mig_index, uuid=f"MIG-{uuid.uuid5(namespace, f'gpu{index}/gi{gi}/ci0')}",
                    profile=profile, gi=gi, ci=0, placement_start=start, placement_size=profile.size,
                    gi_cap_minor=gi_cap_minor(minor, gi), ci_cap_minor=ci_cap_minor(minor, gi, 0),
                    ci_slices=0 if slices == profile.slices else slices))
        result.append(SimGpu(index=index, minor=minor, uuid=f"GPU-{uuid.uuid5(namespace, f'gpu{index}')}",
                             model=model, pci_bus=_PCI_BUSES[index], mig_enabled=index in mig,
                             migs=tuple(migs)))
    return SimHost(driver_version=driver_version, cuda_version=cuda_version, gpus=tuple(result),
                   imex_channels=imex_channels, topology=topology)

