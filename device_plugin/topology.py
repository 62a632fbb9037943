"""The GPU links GetPreferredAllocation scores (device_plugin.preferred), from NVML or described.

`nvml_topology` reads them through the toolkit's NVML binding (cdi.nvml_topology); a driver without
the topology calls (the simulated one, today) gives unknown links, every pair scoring 0, and the
preference is then the request's order. `Topology.described` builds the same from a description, for
tests and for hosts whose topology is known.
"""
from __future__ import annotations

from cdi.nvml_topology import PairLinks
from device_plugin.preferred import NVLINK_SCORE, PCIE_SCORES


class Topology:
    """(GPU index, GPU index) -> the links from the first to the second."""

    def __init__(self, links: dict[tuple[int, int], PairLinks] | None = None):
        self.links = dict(links or {})

    def pair_score(self, a: int, b: int) -> int:
        """NVIDIA's pair score: both directions must be known; the first GPU's links to the second count."""
        if a == b or (a, b) not in self.links or (b, a) not in self.links:
            return 0
        link = self.links[(a, b)]
        return PCIE_SCORES.get(link.pcie_level, 0) + NVLINK_SCORE * link.nvlinks

    @classmethod
    def described(cls, gpus: int, pcie_level: int | None = None, nvlinks: dict[tuple[int, int], int] | None = None,
                  pcie: dict[tuple[int, int], int] | None = None) -> Topology:
        """gpus GPUs (0..gpus-1); every pair at pcie_level unless pcie names the pair; nvlinks: links
        per pair (both directions)."""
        nvlinks, pcie = nvlinks or {}, pcie or {}

        def lookup(table, a, b, default):
            return table.get((a, b), table.get((b, a), default))

        return cls({(a, b): PairLinks(lookup(pcie, a, b, pcie_level), lookup(nvlinks, a, b, 0))
                    for a in range(gpus) for b in range(gpus) if a != b})


def nvml_topology(reads) -> Topology:
    """The links NVML reports between the GPUs, as read by `reads` (device_plugin.nvml_child.ChildRead,
    started with a `topology` reader: a child process, so a driver that hangs or crashes there is one
    warning line, not a hung or ended plugin); unknown (all 0) where it cannot say, or fails, and with
    no reads (fewer than 2 GPUs)."""
    if reads is None or "topology" not in reads.order:
        return Topology()
    try:
        return Topology(reads.result("topology"))
    except Exception as e:   # the topology only orders a preference: never a reason to stop serving
        return _unknown(e)


def _unknown(error: Exception) -> Topology:
    from cdi.log import get_logger

    get_logger("nvidia-device-plugin").warning("GPU topology unknown, preferring no GPUs over others: %s", error)
    return Topology()
