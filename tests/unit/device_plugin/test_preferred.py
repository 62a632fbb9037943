"""GetPreferredAllocation's scoring (NVIDIA's best-effort policy) on described topologies."""
from device_plugin.preferred import best_effort, partition_count, partitions
from device_plugin.topology import Topology

HOSTBRIDGE, SINGLE_SWITCH, SAME_BOARD, CROSS_CPU = 30, 10, 0, 50


def islands(size=8, island=4, links=2):
    """Two NVLink islands (0-3, 4-7), every pair within an island linked by `links` NVLinks; PCIe:
    a host bridge within a CPU's half, across CPUs between halves."""
    nvlinks = {(a, b): links for a in range(size) for b in range(size) if a < b and a // island == b // island}
    pcie = {(a, b): HOSTBRIDGE if a // island == b // island else CROSS_CPU for a in range(size) for b in range(size)}
    return Topology.described(size, nvlinks=nvlinks, pcie=pcie)


def test_a_pair_is_taken_from_one_nvlink_island():
    t = islands()
    chosen = best_effort([0, 4, 5, 1], [], 2, t.pair_score)
    assert sorted(chosen) in ([0, 1], [4, 5])
    assert sorted(best_effort([0, 4, 6, 3], [0], 2, t.pair_score)) == [0, 3]


def test_must_include_is_honoured_even_across_islands():
    t = islands()
    assert sorted(best_effort([0, 1, 2, 4], [0, 4], 2, t.pair_score)) == [0, 4]
    chosen = best_effort(list(range(8)), [5], 4, t.pair_score)
    assert sorted(chosen) == [4, 5, 6, 7]


def test_nvlink_count_weighs_more_than_pcie():
    t = Topology.described(4, pcie_level=SAME_BOARD, nvlinks={(0, 3): 1, (1, 2): 4})
    assert sorted(best_effort([0, 1, 2, 3], [], 2, t.pair_score)) == [1, 2]


def test_pcie_closeness_without_nvlink():
    # 0,1 behind one switch; 2,3 behind a host bridge; across: across CPUs
    pcie = {(0, 1): SINGLE_SWITCH, (2, 3): HOSTBRIDGE}
    t = Topology.described(4, pcie_level=CROSS_CPU, pcie=pcie)
    assert sorted(best_effort([3, 2, 1, 0], [], 2, t.pair_score)) == [0, 1]
    assert sorted(best_effort([3, 2, 1, 0], [3], 2, t.pair_score)) == [2, 3]


def test_the_leftover_stays_good():
    # a greedy pick of the best pair (0,1) would leave 2 and 3 apart; the split scores whole partitions
    t = Topology.described(4, pcie_level=CROSS_CPU, nvlinks={(0, 1): 3, (0, 2): 2, (1, 3): 2})
    assert sorted(best_effort([0, 1, 2, 3], [], 2, t.pair_score)) in ([0, 2], [1, 3])


def test_requests_that_cannot_be_met_get_nothing():
    t = islands()
    assert best_effort([0, 1], [], 3, t.pair_score) == []
    assert best_effort([0, 1, 2], [0, 1, 2], 2, t.pair_score) == []
    assert best_effort([0, 1], [5], 1, t.pair_score) == []
    assert best_effort([0, 1], [], 0, t.pair_score) == []


def test_unknown_topology_keeps_the_request_order():
    t = Topology()
    assert best_effort([3, 1, 2], [], 2, t.pair_score) == [3, 1]
    assert best_effort([3, 1, 2], [2], 1, t.pair_score) == [2]


def test_partitions_are_all_splits():
    assert partition_count(8, 2) == 105 == len(list(partitions(list(range(8)), 2)))
    assert partition_count(5, 2) == len(list(partitions(list(range(5)), 2))) == 15   # padded to 6


def test_large_hosts_are_answered_greedily():
    t = islands(size=16, island=8)
    chosen = best_effort(list(range(16)), [9], 2, t.pair_score)
    assert chosen[0] == 9 and chosen[1] // 8 == 1
