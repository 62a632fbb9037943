"""How a simulated host's GPUs are connected: the PCIe tree and the NVLinks, from `simulate create`'s
`--pcie LEVEL=GPUS` and `--nvlink GPUS[:LINKS]` options.

The simulated NVML answers nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetP2PStatus,
nvmlDeviceGetNvLinkState and nvmlDeviceGetNvLinkRemotePciInfo_v2 from what is decided here.

- `--pcie LEVEL=GPUS` puts GPUS in one group at LEVEL: `board` (one multi-GPU board), `switch` (one PCIe
  switch), `multi-switch` (a tree of switches), `host-bridge`, `cpu` (one CPU / NUMA node). A pair's
  closest common ancestor is the lowest level of a group holding both; a pair in no common group is
  across CPUs (NVML_TOPOLOGY_SYSTEM). Without any --pcie every GPU hangs off one CPU, each on its own
  switch: every pair is NVML_TOPOLOGY_NODE.
- `--nvlink GPUS[:LINKS]` links every pair of GPUS with LINKS NVLinks (default 1). A GPU's links are
  numbered from 0 in the order of its peers' indices; a GPU has at most its model's NVLinks.
GPUS is a range `0-3` or a list `0,2,5`.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

# nvmlGpuTopologyLevel_t
TOPOLOGY_INTERNAL, TOPOLOGY_SINGLE, TOPOLOGY_MULTIPLE = 0, 10, 20
TOPOLOGY_HOSTBRIDGE, TOPOLOGY_NODE, TOPOLOGY_SYSTEM = 30, 40, 50
PCIE_LEVELS = {"board": TOPOLOGY_INTERNAL, "switch": TOPOLOGY_SINGLE, "multi-switch": TOPOLOGY_MULTIPLE,
               "host-bridge": TOPOLOGY_HOSTBRIDGE, "cpu": TOPOLOGY_NODE}


class TopologyError(ValueError):
    """An option that describes no valid topology: (what, the option)."""

    def __init__(self, what: str, where: str):
        super().__init__(what, where)
        self.what, self.where = what, where


@dataclass(frozen=True)
class HostTopology:
    pcie_levels: tuple[tuple[int, ...], ...]    # [a][b]: nvmlGpuTopologyLevel_t of GPUs a and b
    nvlink_remotes: tuple[tuple[int, ...], ...]  # [gpu][link]: the GPU index at the other end, -1 inactive

    def nvlinks_between(self, a: int, b: int) -> int:
        return sum(1 for remote in self.nvlink_remotes[a] if remote == b)

    def to_json(self) -> dict:
        links = {f"{a}-{b}": self.nvlinks_between(a, b) for a, b in combinations(range(len(self.pcie_levels)), 2)
                 if self.nvlinks_between(a, b)}
        return {"pcie_levels": [list(row) for row in self.pcie_levels], "nvlinks": links}


def parse_gpus(text: str, gpu_count: int, where: str) -> list[int]:
    """`0-3` or `0,2,5` -> sorted distinct GPU indices, each below gpu_count."""
    text = text.strip()
    try:
        if "-" in text and "," not in text:
            first, last = (int(part) for part in text.split("-", 1))
            gpus = list(range(first, last + 1))
        else:
            gpus = [int(part) for part in text.split(",")]
    except ValueError:
        raise TopologyError(f"expected GPUs as a range (0-3) or a list (0,2,5), got {text!r}", where) from None
    if len(gpus) < 2 or len(set(gpus)) != len(gpus):
        raise TopologyError("a group needs at least two distinct GPUs", where)
    bad = [g for g in gpus if not 0 <= g < gpu_count]
    if bad:
        raise TopologyError(f"GPU {bad[0]} does not exist on a host with {gpu_count} GPUs", where)
    return sorted(gpus)


def _pcie_levels(options: list[str], gpu_count: int) -> list[list[int]]:
    if not options:
        levels = [[TOPOLOGY_NODE] * gpu_count for _ in range(gpu_count)]
    else:
        levels = [[TOPOLOGY_SYSTEM] * gpu_count for _ in range(gpu_count)]
    for option in options:
        where = f"--pcie {option}"
        kind, sep, gpus_text = option.partition("=")
        if not sep or kind.strip() not in PCIE_LEVELS:
            raise TopologyError(f"expected LEVEL=GPUS with LEVEL one of {', '.join(PCIE_LEVELS)}", where)
        level = PCIE_LEVELS[kind.strip()]
        for a, b in combinations(parse_gpus(gpus_text, gpu_count, where), 2):
            levels[a][b] = levels[b][a] = min(levels[a][b], level)
    for g in range(gpu_count):
        levels[g][g] = TOPOLOGY_INTERNAL
    return levels


def _nvlink_remotes(options: list[str], gpu_count: int, links_per_gpu: int) -> list[list[int]]:
    between: dict[tuple[int, int], int] = {}
    for option in options:
        where = f"--nvlink {option}"
        gpus_text, sep, links_text = option.partition(":")
        if sep and not links_text.strip().isdigit():
            raise TopologyError(f"expected GPUS[:LINKS] with LINKS a number, got {links_text!r}", where)
        links = int(links_text) if sep else 1
        if links < 1:
            raise TopologyError("a link needs at least one NVLink", where)
        if links_per_gpu == 0:
            raise TopologyError("the GPU model has no NVLink", where)
        for pair in combinations(parse_gpus(gpus_text, gpu_count, where), 2):
            if pair in between:
                raise TopologyError(f"GPUs {pair[0]} and {pair[1]} are linked twice", where)
            between[pair] = links
        for g in range(gpu_count):
            used = sum(n for pair, n in between.items() if g in pair)
            if used > links_per_gpu:
                raise TopologyError(f"GPU {g} would have {used} NVLinks, its model has {links_per_gpu}", where)
    remotes = []
    for g in range(gpu_count):
        row: list[int] = []
        for peer in range(gpu_count):
            row += [peer] * between.get((min(g, peer), max(g, peer)), 0) if peer != g else []
        remotes.append(row + [-1] * (links_per_gpu - len(row)))
    return remotes


def build_topology(gpu_count: int, links_per_gpu: int, pcie_options: list[str] | tuple[str, ...] = (),
                   nvlink_options: list[str] | tuple[str, ...] = ()) -> HostTopology:
    levels = _pcie_levels(list(pcie_options), gpu_count)
    remotes = _nvlink_remotes(list(nvlink_options), gpu_count, links_per_gpu)
    return HostTopology(tuple(tuple(r) for r in levels), tuple(tuple(r) for r in remotes))
