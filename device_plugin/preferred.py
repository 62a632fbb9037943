"""GetPreferredAllocation: which of the available GPUs a container asking for N of them should get.

NVIDIA's best-effort policy (go-gpuallocator), so that the kubelet picks what NVIDIA's plugin would:
- a pair of GPUs scores the sum of its links: 100 per NVLink between them, plus its closest common PCIe
  ancestor: same board 60, one PCIe switch 50, several switches 40, a host bridge 30, the same CPU
  (NUMA node) 20, across CPUs 10; a pair whose links are unknown scores 0;
- a set scores the sum of its pairs; the available GPUs are split into sets of N (padded with empty
  places) in every way, the split whose sets score most in total wins (among those with a set holding
  every must_include GPU), and of that split the best-scoring set holding must_include is the answer.
So the chosen set is good and what is left over stays good for the next request. Beyond
EXHAUSTIVE_LIMIT splits (e.g. 16 GPUs taken 2 at a time) it grows the set greedily instead: from
must_include, always adding the GPU that adds most to the set's score.

MIG devices have no links: the answer is must_include, then the other available ones in order.
Time-sliced replicas (`<UUID>::<n>`) are spread, as NVIDIA's "distributed" policy spreads them: must_include,
then one replica at a time from the device with the fewest replicas in use (offered by the resource but
neither available nor already chosen; ties: the first in the available order), so pods land on the
least-shared GPUs first.
The links come from a Topology (device_plugin.topology: NVML's, or described ones in tests).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import combinations
from math import factorial

from cdi.errors import CdiError

NVLINK_SCORE = 100
# nvmlGpuTopologyLevel_t -> score of that closest common ancestor
PCIE_SCORES = {0: 60, 10: 50, 20: 40, 30: 30, 40: 20, 50: 10}
EXHAUSTIVE_LIMIT = 200_000

PairScore = Callable[[int, int], int]   # (GPU index, GPU index) -> score


class PreferenceError(CdiError):
    """A GetPreferredAllocation request naming a device the resource does not have."""


def set_score(devices, pair_score: PairScore) -> int:
    present = [d for d in devices if d is not None]
    return sum(pair_score(a, b) for a, b in combinations(present, 2))


def partition_count(n: int, size: int) -> int:
    """How many ways n devices (padded to a multiple of size) split into unordered sets of size."""
    m = -(-n // size) * size
    k = m // size
    return factorial(m) // (factorial(size) ** k * factorial(k))


def partitions(devices: list, size: int) -> Iterator[list[tuple]]:
    """Every split of devices (padded with None to a multiple of size) into sets of size, each set
    holding the first device not yet placed, then combinations in order."""
    padded = list(devices) + [None] * (-len(devices) % size)

    def split(rest: list) -> Iterator[list[tuple]]:
        if not rest:
            yield []
            return
        first, others = rest[0], rest[1:]
        for combo in combinations(range(len(others)), size - 1):
            chosen = (first, *(others[i] for i in combo))
            remaining = [d for i, d in enumerate(others) if i not in combo]
            for tail in split(remaining):
                yield [chosen, *tail]

    return split(padded)


def _holds(group, required: list) -> bool:
    return all(r in group for r in required)


def _exhaustive(available: list[int], required: list[int], size: int, pair_score: PairScore) -> list[int]:
    if size == 1:
        return required[:1] or available[:1]
    best, best_score = None, 0
    for candidate in partitions(available, size):
        if not any(_holds(group, required) for group in candidate):
            continue
        score = sum(set_score(group, pair_score) for group in candidate)
        if best is None or score > best_score:
            best, best_score = candidate, score
    groups = [g for g in best or [] if _holds(g, required)]
    if not groups:
        return []
    groups.sort(key=lambda g: set_score(g, pair_score), reverse=True)   # stable: the first of the best
    return [d for d in groups[0] if d is not None]


def _greedy(available: list[int], required: list[int], size: int, pair_score: PairScore) -> list[int]:
    chosen = list(required)
    rest = [d for d in available if d not in chosen]
    while len(chosen) < size:
        best = max(rest, key=lambda d: sum(pair_score(d, c) for c in chosen))
        chosen.append(best)
        rest.remove(best)
    return chosen


def best_effort(available: list[int], required: list[int], size: int, pair_score: PairScore) -> list[int]:
    """The preferred GPUs (indices) of available, holding required; [] when the request cannot be met
    (size <= 0, fewer available than size, more required than size, required not available)."""
    if size <= 0 or len(available) < size or len(required) > size or not _holds(available, required):
        return []
    if partition_count(len(available), size) > EXHAUSTIVE_LIMIT:
        return _greedy(available, required, size, pair_score)
    return _exhaustive(available, required, size, pair_score)


def distributed(resource, available_ids: list[str], required_ids: list[str], size: int) -> list[str]:
    """must_include, then the replicas of the least-used devices (NVIDIA's distributed policy); [] when
    the request cannot be met."""
    candidates = [i for i in dict.fromkeys(available_ids) if i not in required_ids]
    needed = size - len(required_ids)
    if size <= 0 or needed < 0 or len(candidates) < needed:
        return []
    uuid_of = {d.id: d.uuid for d in resource.devices}
    total: dict[str, int] = {}
    for device in resource.devices:
        total[device.uuid] = total.get(device.uuid, 0) + 1
    free: dict[str, int] = {}
    for candidate in candidates:
        free[uuid_of[candidate]] = free.get(uuid_of[candidate], 0) + 1
    chosen: list[str] = []
    for _ in range(needed):
        best = min(candidates, key=lambda i: total[uuid_of[i]] - free[uuid_of[i]])   # min: the first of equals
        chosen.append(best)
        candidates.remove(best)
        free[uuid_of[best]] -= 1
    return list(required_ids) + chosen


def preferred_allocation(resource, available_ids, required_ids, size: int, pair_score: PairScore) -> list[str]:
    """The preferred device IDs (UUIDs) of resource; PreferenceError naming an ID it does not have."""
    available_ids, required_ids = list(available_ids), list(required_ids)
    devices = {}
    for device_id in available_ids + required_ids:
        device = resource.device(device_id)
        if device is None:
            raise PreferenceError(f"unknown device {device_id!r}: not a device of {resource.name}",
                                  f"{resource.name} GetPreferredAllocation")
        devices[device_id] = device
    if any(d.replica is not None for d in devices.values()):
        return distributed(resource, available_ids, required_ids, size)
    if any(d.mig is not None for d in devices.values()):
        if size <= 0 or len(available_ids) < size or len(required_ids) > size:
            return []
        rest = [i for i in available_ids if i not in required_ids]
        return (required_ids + rest)[:size]
    by_index = {devices[i].gpu_index: i for i in available_ids + required_ids}
    chosen = best_effort([devices[i].gpu_index for i in available_ids],
                         [devices[i].gpu_index for i in required_ids], size, pair_score)
    return [by_index[i] for i in chosen]
