"""How a host's GPUs are connected, read through NVML (cdi.nvml_binding): for every pair, the closest
common PCIe ancestor (nvmlDeviceGetTopologyCommonAncestor) and the number of active NVLinks from one
to the other (nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemotePciInfo_v2), as NVIDIA's device
plugin reads them for GetPreferredAllocation.

A driver that does not answer a call (no NVLink, a library without the symbol: NVML_ERROR_NOT_SUPPORTED,
NVML_ERROR_FUNCTION_NOT_FOUND, ...) gives "unknown" for that pair: no PCIe level, no NVLink.
"""
from __future__ import annotations

from dataclasses import dataclass

from cdi.driver_root import DriverRoot

NVLINK_MAX_LINKS = 18   # NVML_NVLINK_MAX_LINKS
NVLINK_ACTIVE = 1       # NVML_FEATURE_ENABLED


@dataclass(frozen=True)
class PairLinks:
    pcie_level: int | None   # nvmlGpuTopologyLevel_t, None: unknown
    nvlinks: int             # active NVLinks from the first GPU to the second


def bus_id_key(bus_id: str) -> str:
    """A PCI bus id as NVML's calls may write it (case, a 4 or 8 digit domain) in one form."""
    head, sep, tail = bus_id.strip().lower().partition(":")
    try:
        return f"{int(head, 16):08x}:{tail}" if sep else bus_id.lower()
    except ValueError:
        return bus_id.lower()


def _nvlinks_to(nvml, handle, remote_bus_id: str) -> int:
    from cdi.nvml_binding import NvmlCallError

    target, count = bus_id_key(remote_bus_id), 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            if nvml.device_nvlink_state(handle, link) != NVLINK_ACTIVE:
                continue
            if bus_id_key(nvml.device_nvlink_remote_pci_info(handle, link).busId) == target:
                count += 1
        except NvmlCallError:
            continue   # past the GPU's links, or no NVLink at all
    return count


def read_links(driver_root: DriverRoot | str, gpu_indices: list[int]) -> dict[tuple[int, int], PairLinks]:
    """(index a, index b) -> PairLinks for every ordered pair of distinct GPUs of gpu_indices."""
    from cdi.nvml import in_process
    from cdi.nvml_binding import NvmlCallError

    links: dict[tuple[int, int], PairLinks] = {}
    with in_process(driver_root) as nvml:
        handles = {i: nvml.device_handle_by_index(i) for i in gpu_indices}
        bus_ids = {i: nvml.device_pci_info(h).busId for i, h in handles.items()}
        for a in gpu_indices:
            for b in gpu_indices:
                if a == b:
                    continue
                try:
                    level = nvml.device_topology_common_ancestor(handles[a], handles[b])
                except NvmlCallError:
                    level = None
                links[(a, b)] = PairLinks(level, _nvlinks_to(nvml, handles[a], bus_ids[b]))
    return links
