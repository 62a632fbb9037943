"""Node labels as NVIDIA's gpu-feature-discovery (GFD, v0.17, part of k8s-device-plugin) writes them: an
NFD feature file (`key=value` lines, NFD's `local` source reads every file in
/etc/kubernetes/node-feature-discovery/features.d/ and puts its lines on the node as labels), so that
schedulers can pick a GPU model, a MIG profile or a driver (docs/device-plugin.md, Node labels).

The facts come from NVML through the toolkit's binding: the inventory (cdi.nvml.load_inventory) and,
read as GFD reads them (read_facts, which the plugin and `labels` run in their NVML child:
device_plugin.nvml_child), each GPU's MIG capability (nvmlDeviceGetMigMode answering at all) and each MIG
device's attributes (nvmlDeviceGetAttributes_v2). The labels are GFD's, value for value:

- always: `nvidia.com/gfd.timestamp` (unless left out), `nvidia.com/gpu.machine` (the DMI product name,
  spaces as '-', "unknown" when it cannot be read), the driver and CUDA versions
  (`nvidia.com/cuda.driver-version.{major,minor,revision,full}`, `nvidia.com/cuda.runtime-version.*`,
  and the deprecated `nvidia.com/cuda.driver.{major,minor,rev}`, `nvidia.com/cuda.runtime.{major,minor}`),
  `nvidia.com/mig.capable`, `nvidia.com/mps.capable` (true when sharing.mps is configured);
- with time-slicing or MPS (sharing.timeSlicing or sharing.mps, more than 1 replica) a resource's
  `replicas` is the configured number, its `sharing-strategy` is `time-slicing` or `mps` and its
  `product` ends in `-SHARED` unless the shared resource is renamed (GFD's rule; keys keep the
  resource's own name);
- the GPUs as `nvidia.com/gpu.{product,count,replicas,sharing-strategy,memory,family,compute.major,
  compute.minor}`: per GPU model, counted with the GPUs in MIG mode (GFD counts them too). A model whose
  every GPU is in MIG mode gets replicas 0, as GFD's labeler without sharing gives; with several models,
  GFD keeps one at random (Go's map order), this the last in index order, GPUs not in MIG mode winning;
- under mig-strategy single and mixed `nvidia.com/mig.strategy`, and per MIG profile the labels of its
  resource: single overrides `nvidia.com/gpu.*` with the MIG devices' (`product` the GPU's model with
  `-MIG-<profile>`, `count` the MIG devices, `memory` theirs, `multiprocessors`, `slices.gi`, `slices.ci`,
  `engines.{copy,decoder,encoder,jpeg,ofa}`); mixed writes them as `nvidia.com/mig-<profile>.*`. A node
  single cannot serve (GPUs in and out of MIG mode, two profiles, a GPU in MIG mode without MIG devices)
  gets GFD's `<model>-MIG-INVALID` product with count, replicas and memory 0.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from cdi.errors import CdiError

NFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
DEFAULT_OUTPUT_FILE = f"{NFD_FEATURES_DIR}/gfd"       # GFD's default
DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
MACHINE_TYPE_UNKNOWN = "unknown"
MAX_MACHINE_TYPE_BYTES = 1 << 16
GPU = "nvidia.com/gpu"


class LabelError(CdiError):
    """The labels cannot be read or written."""


@dataclass(frozen=True)
class MigFacts:
    profile: str                    # GFD's name: the profile with '+' as '.', e.g. 1g.10gb.me
    attributes: dict[str, int]      # memory, multiprocessors, slices.gi, slices.ci, engines.*


@dataclass(frozen=True)
class GpuFacts:
    name: str                       # NVML's, e.g. "NVIDIA A100-SXM4-40GB"
    memory_mb: int
    compute: tuple[int, int]
    mig_capable: bool
    mig_enabled: bool
    migs: tuple[MigFacts, ...] = ()


@dataclass(frozen=True)
class NodeFacts:
    driver_version: str             # "550.54.15"
    cuda_version: str               # "12.4"
    gpus: tuple[GpuFacts, ...] = ()
    machine: str = MACHINE_TYPE_UNKNOWN


# -- the labels ------------------------------------------------------------------------------------------

def arch_family(major: int, minor: int) -> str:
    """GFD's family of a compute capability (its getArchFamily)."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}.get(major, "undefined")


def product_name(*parts: str) -> str:
    """GFD's product: each part with characters other than letters, digits, '-', '_', '.' and spaces
    dropped, runs of spaces as one '-', the parts joined by '-'."""
    kept = []
    for part in parts:
        clean = "".join(c for c in part if c.isascii() and (c.isalnum() or c in "-_. "))
        if clean.split():
            kept.append("-".join(clean.split()))
    return "-".join(kept)


# resource name (before any rename) -> (replicas, renamed, strategy): the shared resources of the config
Sharing = dict[str, tuple[int, bool, str]]


def sharing_of(sharing) -> Sharing:
    """The shared resources of a config's sharing in force (Config.sharing: sharing.mps or
    sharing.timeSlicing; None: no sharing)."""
    if sharing is None:
        return {}
    return {r.name: (r.replicas, bool(r.rename), sharing.strategy) for r in sharing.resources}


def _resource(resource: str, count: int, product: str, replicas: int, sharing: Sharing | None = None
              ) -> dict[str, str]:
    """GFD's base labels of a resource; shared (more than 1 replica) replicas says how many,
    sharing-strategy `time-slicing` or `mps`, and the product gets `-SHARED` unless the shared resource is
    renamed."""
    strategy = "none"
    shared_replicas, renamed, shared_by = (sharing or {}).get(resource, (1, False, "none"))
    if replicas and shared_replicas > 1:
        replicas, strategy = shared_replicas, shared_by
        product = product if renamed else f"{product}-SHARED"
    return {f"{resource}.product": product, f"{resource}.count": str(count), f"{resource}.replicas": str(replicas),
            f"{resource}.sharing-strategy": strategy}


def _full_gpu_labels(gpus: tuple[GpuFacts, ...], sharing: Sharing) -> dict[str, str]:
    """GFD's full-GPU labels: per model (count includes GPUs in MIG mode); models only in MIG mode first,
    without sharing (replicas 0), then the others (replicas 1) over them."""
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu.name] = counts.get(gpu.name, 0) + 1
    labels: dict[str, str] = {}
    for in_mig_mode in (True, False):
        for gpu in {g.name: g for g in gpus if g.mig_enabled == in_mig_mode}.values():
            labels.update(_resource(GPU, counts[gpu.name], product_name(gpu.name), 0 if in_mig_mode else 1, sharing))
            if gpu.memory_mb:
                labels[f"{GPU}.memory"] = str(gpu.memory_mb)
            major, minor = gpu.compute
            if major:
                labels.update({f"{GPU}.family": arch_family(major, minor), f"{GPU}.compute.major": str(major),
                               f"{GPU}.compute.minor": str(minor)})
    return labels


def _mig_resource_labels(resource: str, parent: GpuFacts, mig: MigFacts, count: int, sharing: Sharing
                         ) -> dict[str, str]:
    labels = _resource(resource, count, product_name(parent.name, "MIG", mig.profile), 1, sharing)
    labels.update({f"{resource}.{key}": str(value) for key, value in mig.attributes.items()})
    return labels


def _by_profile(gpus) -> dict[str, tuple[GpuFacts, MigFacts, int]]:
    """profile -> (a GPU, its first MIG device of the profile, how many the node has)."""
    found: dict[str, tuple[GpuFacts, MigFacts, int]] = {}
    for gpu in gpus:
        for mig in gpu.migs if gpu.mig_enabled else ():
            first_gpu, first_mig, count = found.get(mig.profile, (gpu, mig, 0))
            found[mig.profile] = (first_gpu, first_mig, count + 1)
    return found


def _single_labels(gpus: tuple[GpuFacts, ...], sharing: Sharing) -> dict[str, str]:
    in_mig_mode = [g for g in gpus if g.mig_enabled]
    if not in_mig_mode:
        return {}   # as mig-strategy none
    profiles = _by_profile(gpus)
    if any(not g.migs for g in in_mig_mode) or len(in_mig_mode) != len(gpus) or len(profiles) != 1:
        return {f"{GPU}.product": product_name(in_mig_mode[0].name, "MIG", "INVALID"), f"{GPU}.count": "0",
                f"{GPU}.replicas": "0", f"{GPU}.memory": "0"}
    (gpu, mig, count), = profiles.values()
    return _mig_resource_labels(GPU, gpu, mig, count, sharing)


def _mixed_labels(gpus: tuple[GpuFacts, ...], sharing: Sharing) -> dict[str, str]:
    labels: dict[str, str] = {}
    for profile, (gpu, mig, count) in _by_profile(gpus).items():
        labels.update(_mig_resource_labels(f"nvidia.com/mig-{profile}", gpu, mig, count, sharing))
    return labels


def _version_labels(driver_version: str, cuda_version: str) -> dict[str, str]:
    parts = driver_version.split(".")
    if not 2 <= len(parts) <= 3:
        raise LabelError(f"driver version {driver_version!r} does not match X.Y[.Z]")
    major, minor, rev = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
    cuda_major, _, cuda_minor = cuda_version.partition(".")
    return {"nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
            "nvidia.com/cuda.driver.rev": rev,
            "nvidia.com/cuda.runtime.major": cuda_major, "nvidia.com/cuda.runtime.minor": cuda_minor,
            "nvidia.com/cuda.driver-version.major": major, "nvidia.com/cuda.driver-version.minor": minor,
            "nvidia.com/cuda.driver-version.revision": rev, "nvidia.com/cuda.driver-version.full": driver_version,
            "nvidia.com/cuda.runtime-version.major": cuda_major, "nvidia.com/cuda.runtime-version.minor": cuda_minor,
            "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}"}


def node_labels(facts: NodeFacts, mig_strategy: str, timestamp: int | None = None,
                sharing: Sharing | None = None) -> dict[str, str]:
    """The labels GFD writes for facts under mig_strategy (none, single, mixed); timestamp: the
    nvidia.com/gfd.timestamp value, None to leave it out; sharing: the shared resources
    (sharing_of). A node without GPUs gets the timestamp only."""
    sharing = sharing or {}
    labels = {} if timestamp is None else {"nvidia.com/gfd.timestamp": str(timestamp)}
    if not facts.gpus:
        return labels
    labels["nvidia.com/gpu.machine"] = facts.machine.replace(" ", "-")
    labels.update(_version_labels(facts.driver_version, facts.cuda_version))
    labels["nvidia.com/mig.capable"] = "true" if any(g.mig_capable for g in facts.gpus) else "false"
    labels["nvidia.com/mps.capable"] = "true" if any(s[2] == "mps" for s in sharing.values()) else "false"
    labels.update(_full_gpu_labels(facts.gpus, sharing))
    if mig_strategy != "none":
        labels["nvidia.com/mig.strategy"] = mig_strategy
        labels.update(_single_labels(facts.gpus, sharing) if mig_strategy == "single"
                      else _mixed_labels(facts.gpus, sharing))
    return labels


def render(labels: dict[str, str]) -> str:
    """The NFD feature file: one `key=value` line per label, sorted (GFD writes Go's map order)."""
    return "".join(f"{key}={labels[key]}\n" for key in sorted(labels))


# -- reading the facts -----------------------------------------------------------------------------------

def machine_type(path: str) -> str:
    """The DMI product name in path, stripped; "unknown" when there is no path or it cannot be read
    (GFD logs a warning and says unknown)."""
    if not path:
        return MACHINE_TYPE_UNKNOWN
    from cdi.regular_file import read_regular_file

    try:
        data = read_regular_file(path, MAX_MACHINE_TYPE_BYTES)[0]
    except (OSError, ValueError):
        return MACHINE_TYPE_UNKNOWN
    return data.decode("utf-8", "replace").strip() or MACHINE_TYPE_UNKNOWN


def read_facts(driver_root: str, machine_type_file: str = DEFAULT_MACHINE_TYPE_FILE,
               inventory=None) -> NodeFacts:
    """The node's facts from NVML under driver_root (inventory: one read already, else it is read).
    cdi.nvml.NvmlError when NVML cannot be read."""
    from cdi.nvml import NvmlError, in_process, load_inventory
    from cdi.nvml_binding import ERROR_NOT_SUPPORTED, NvmlCallError

    inventory = inventory if inventory is not None else load_inventory(driver_root)
    gpus = []
    with in_process(driver_root) as nvml:
        for gpu in inventory.gpus:
            try:
                handle = nvml.device_handle_by_index(gpu.index)
                try:
                    nvml.device_mig_mode(handle)
                    mig_capable = True
                except NvmlCallError as e:
                    if e.code != ERROR_NOT_SUPPORTED:
                        raise
                    mig_capable = False
                migs = tuple(_mig_facts(nvml, handle, m) for m in gpu.mig_devices) if gpu.mig_enabled else ()
            except NvmlCallError as e:
                raise NvmlError(f"NVML query failed: {e}", f"GPU {gpu.index}") from None
            major, _, minor = gpu.compute_capability.partition(".")
            gpus.append(GpuFacts(name=gpu.name, memory_mb=gpu.memory_total // (1 << 20),
                                 compute=(int(major or 0), int(minor or 0)), mig_capable=mig_capable,
                                 mig_enabled=gpu.mig_enabled, migs=migs))
    return NodeFacts(driver_version=inventory.driver_version, cuda_version=inventory.cuda_version, gpus=tuple(gpus),
                     machine=machine_type(machine_type_file))


def _mig_facts(nvml, gpu_handle, mig) -> MigFacts:
    a = nvml.device_attributes(nvml.device_mig_device_handle_by_index(gpu_handle, mig.index))
    return MigFacts(profile=mig.profile.replace("+", "."), attributes={
        "memory": a.memorySizeMB, "multiprocessors": a.multiprocessorCount,
        "slices.gi": a.gpuInstanceSliceCount, "slices.ci": a.computeInstanceSliceCount,
        "engines.copy": a.sharedCopyEngineCount, "engines.decoder": a.sharedDecoderCount,
        "engines.encoder": a.sharedEncoderCount, "engines.jpeg": a.sharedJpegCount, "engines.ofa": a.sharedOfaCount})


# -- the file --------------------------------------------------------------------------------------------

def write_labels(path: str, labels: dict[str, str]) -> None:
    """The feature file at path, replaced as a whole (a new file renamed over it: NFD never reads half
    of it), mode 0644; its folder is made when missing. LabelError when it cannot be written, or path
    is a device, FIFO or socket (the rename would replace it). cdi.new_file.write_atomically: an existing
    file keeps its mode and owner."""
    import stat

    from cdi.new_file import write_atomically

    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode):
            raise LabelError("not a regular file: writing the labels (a new file renamed over the path) "
                             "would replace it", path)
    try:
        write_atomically(path, render(labels))
    except OSError as e:
        raise LabelError(f"cannot write the labels: {e.strerror or e}", path) from None


def remove_labels(path: str) -> None:
    """Removes the feature file (the node's labels go with the program that kept them, as GFD's)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise LabelError(f"cannot remove the labels: {e.strerror or e}", path) from None


def now() -> int:
    return int(time.time())

