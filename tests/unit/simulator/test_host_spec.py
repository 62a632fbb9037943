"""simulator.host_spec: option validation, MIG placement, ids and capability minors."""
from __future__ import annotations

import pytest

from simulator.host_spec import (MAX_GPUS, SimulatorError, build_host_spec, ci_cap_minor, gi_cap_minor,
                                 gi_id_for_placement)
from simulator.models import find_model

A100 = "NVIDIA A100-SXM4-40GB"


def test_defaults_two_a100_no_mig():
    host = build_host_spec("/x")
    assert [g.model.name for g in host.gpus] == [A100, A100]
    assert host.driver_version == "550.54.15" and host.cuda_version == "12.4"
    assert host.cuda_version_int == 12040
    assert build_host_spec("/x", cuda_version="11.8").cuda_version_int == 11080
    assert build_host_spec("/x", cuda_version="12.10").cuda_version_int == 12100   # NVML: major*1000 + minor*10
    assert not any(g.mig_enabled or g.migs for g in host.gpus)
    assert [g.minor for g in host.gpus] == [0, 1]
    assert host.gpus[0].bus_id == "00000000:07:00.0" and host.gpus[0].proc_bus_id == "0000:07:00.0"


def test_uuids_are_stable_per_root_and_differ_between_roots():
    a1 = build_host_spec("/a", mig_options=["1=1g.5gb"])
    a2 = build_host_spec("/a", mig_options=["1=1g.5gb"])
    b = build_host_spec("/b", mig_options=["1=1g.5gb"])
    assert [g.uuid for g in a1.gpus] == [g.uuid for g in a2.gpus]
    assert a1.gpus[1].migs[0].uuid == a2.gpus[1].migs[0].uuid
    assert not {g.uuid for g in a1.gpus} & {g.uuid for g in b.gpus}
    assert a1.gpus[0].uuid.startswith("GPU-") and a1.gpus[1].migs[0].uuid.startswith("MIG-")
    assert len({g.uuid for g in build_host_spec("/c", gpus=MAX_GPUS).gpus}) == MAX_GPUS


def test_mig_devices_get_real_gi_ids_placements_and_cap_minors():
    host = build_host_spec("/x", gpus=2, mig_options=["1=3g.20gb,2g.10gb,1g.5gb"])
    gpu = host.gpus[1]
    assert gpu.mig_enabled and not host.gpus[0].mig_enabled
    got = [(m.index, m.profile.name, m.profile.id, m.placement_start, m.placement_size, m.gi, m.ci) for m in gpu.migs]
    # 3g takes slots 0-3 (GI 1), 2g the first free pair 4-5 (GI 5), 1g slot 6 (GI 13)
    assert got == [(0, "3g.20gb", 9, 0, 4, 1, 0), (1, "2g.10gb", 14, 4, 2, 5, 0), (2, "1g.5gb", 19, 6, 1, 13, 0)]
    for m in gpu.migs:
        assert m.gi_cap_minor == 3 + 135 * 1 + 9 * m.gi
        assert m.ci_cap_minor == m.gi_cap_minor + 1 + m.ci


def test_gi_ids_follow_the_real_a100_and_a30_layouts():
    a100, a30 = find_model(A100), find_model("NVIDIA A30")
    assert gi_id_for_placement(a100, 0, 8) == 0
    assert [gi_id_for_placement(a100, s, 4) for s in (0, 4)] == [1, 2]
    assert [gi_id_for_placement(a100, s, 2) for s in (0, 2, 4, 6)] == [3, 4, 5, 6]
    assert [gi_id_for_placement(a100, s, 1) for s in range(7)] == list(range(7, 14))
    assert gi_id_for_placement(a30, 0, 4) == 0
    assert [gi_id_for_placement(a30, s, 1) for s in range(4)] == [3, 4, 5, 6]


def test_cap_minor_formula():
    assert gi_cap_minor(0, 0) == 3 and ci_cap_minor(0, 0, 0) == 4
    assert gi_cap_minor(2, 13) == 3 + 270 + 117 and ci_cap_minor(2, 13, 7) == gi_cap_minor(2, 13) + 8


def test_profiles_by_id_and_other_models():
    host = build_host_spec("/x", gpus=1, model_name="h100 80gb hbm3", mig_options=["0=19,1g.20gb,3g.40gb"])
    assert [m.profile.name for m in host.gpus[0].migs] == ["1g.10gb", "1g.20gb", "3g.40gb"]
    assert build_host_spec("/x", gpus=1, model_name="T4").gpus[0].model.name == "Tesla T4"
    seven = build_host_spec("/x", gpus=1, mig_options=["0=" + ",".join(["1g.5gb"] * 7)])
    assert [m.gi for m in seven.gpus[0].migs] == list(range(7, 14))


@pytest.mark.parametrize("kwargs, where, what", [
    ({"gpus": 0}, "--gpus", "1 to 16"),
    ({"gpus": 17}, "--gpus", "1 to 16"),
    ({"model_name": "Radeon"}, "--model", "unknown GPU model"),
    ({"driver_version": "550"}, "--driver-version", "invalid driver version"),
    ({"driver_version": "550.54.15; rm"}, "--driver-version", "invalid driver version"),
    ({"cuda_version": "twelve"}, "--cuda-version", "invalid CUDA version"),
    ({"imex_channels": -1}, "--imex-channels", "IMEX channels"),
    ({"imex_channels": 2049}, "--imex-channels", "at most 2048"),
    ({"mig_options": ["1"]}, "--mig 1", "expected GPU=PROFILE"),
    ({"mig_options": ["a=1g.5gb"]}, "--mig a=1g.5gb", "expected GPU=PROFILE"),
    ({"mig_options": ["1="]}, "--mig 1=", "expected GPU=PROFILE"),
    ({"mig_options": ["2=1g.5gb"]}, "--mig 2=1g.5gb", "GPU 2 does not exist"),
    ({"mig_options": ["0=1g.5gb", "0=2g.10gb"]}, "--mig 0=2g.10gb", "given twice"),
    ({"mig_options": ["0=5g.25gb"]}, "--mig 0=5g.25gb", "unknown MIG profile '5g.25gb'"),
    ({"mig_options": ["0=" + ",".join(["1g.5gb"] * 8)]}, None, "at most 7 per GPU"),
    ({"mig_options": ["0=7g.40gb,1g.5gb"]}, "--mig 0=7g.40gb,1g.5gb", "do not fit"),
    ({"mig_options": ["0=4g.20gb,4g.20gb"]}, "--mig 0=4g.20gb,4g.20gb", "at most one instance"),
    ({"mig_options": ["0=1g.5gb+me,1g.5gb+me"]}, None, "at most one instance"),
    ({"model_name": "Tesla T4", "mig_options": ["0=1g.5gb"]}, "--mig 0=1g.5gb", "does not support MIG"),
    ({"mig_options": ["0=4c.3g.20gb"]}, "--mig 0=4c.3g.20gb",
     "no compute instance of 4c.3g.20gb (a 3g.20gb GPU instance takes 1c, 2c, 3c)"),
    ({"mig_options": ["0=3c.4g.20gb"]}, None, "(a 4g.20gb GPU instance takes 1c, 2c, 4c)"),
    ({"mig_options": ["0=0c.1g.5gb"]}, None, "no compute instance of 0c.1g.5gb"),
    ({"mig_options": ["0=1c.5g.25gb"]}, None, "unknown MIG profile '1c.5g.25gb'"),
])
def test_bad_options_are_one_clear_error(kwargs, where, what):
    with pytest.raises(SimulatorError) as err:
        build_host_spec("/x", **kwargs)
    assert what in err.value.what
    if where:
        assert err.value.where == where
    assert "\n" not in str(err.value)


def test_marker_json_holds_the_inventory():
    host = build_host_spec("/x", mig_options=["1=1g.5gb"])
    data = host.to_json()
    assert data["driver_version"] == "550.54.15"
    assert [g["uuid"] for g in data["gpus"]] == [g.uuid for g in host.gpus]
    mig = data["gpus"][1]["mig_devices"][0]
    assert mig["profile"] == "1g.5gb" and mig["gi_cap_minor"] == host.gpus[1].migs[0].gi_cap_minor


def test_topology_options_decide_levels_and_links():
    host = build_host_spec("/x", gpus=4, pcie_options=["switch=0,1", "host-bridge=0-3"], nvlink_options=["0-1:2"])
    levels = host.topology.pcie_levels
    assert levels[0][1] == 10 and levels[0][2] == 30 and levels[2][3] == 30 and levels[1][1] == 0
    assert host.topology.nvlink_remotes[0] == (1, 1) + (-1,) * 10    # links 0-1 to GPU 1, the rest inactive
    assert host.topology.nvlink_remotes[2] == (-1,) * 12
    assert host.to_json()["topology"]["nvlinks"] == {"0-1": 2}
    # without --pcie every pair hangs off one CPU; a pair in no --pcie group is across CPUs
    assert build_host_spec("/x", gpus=2).topology.pcie_levels[0][1] == 40
    assert build_host_spec("/x", gpus=3, pcie_options=["cpu=0,1"]).topology.pcie_levels[0][2] == 50


@pytest.mark.parametrize("options, message", [
    (dict(nvlink_options=["0-2:7"]), "GPU 0 would have 14 NVLinks, its model has 12 (--nvlink 0-2:7)"),
    (dict(nvlink_options=["0-1", "1,0"]), "GPUs 0 and 1 are linked twice (--nvlink 1,0)"),
    (dict(nvlink_options=["0-5"]), "GPU 4 does not exist on a host with 4 GPUs (--nvlink 0-5)"),
    (dict(nvlink_options=["0:x"]), "expected GPUS[:LINKS] with LINKS a number, got 'x' (--nvlink 0:x)"),
    (dict(nvlink_options=["2"]), "a group needs at least two distinct GPUs (--nvlink 2)"),
    (dict(pcie_options=["rack=0-1"]), "expected LEVEL=GPUS with LEVEL one of board, switch, multi-switch, "
                                      "host-bridge, cpu (--pcie rack=0-1)"),
    (dict(nvlink_options=["0-1"], model_name="Tesla T4"), "the GPU model has no NVLink (--nvlink 0-1)"),
])
def test_bad_topology_options_name_the_option(options, message):
    with pytest.raises(SimulatorError) as e:
        build_host_spec("/x", gpus=4, **options)
    assert str(e.value) == message


def test_a_compute_instance_smaller_than_its_gpu_instance():
    """`<C>c.<profile>`: one compute instance of C slices in a GPU instance of the profile, named as NVML
    names such a MIG device; `<slices>c.<profile>` is the ordinary one."""
    host = build_host_spec("/x", mig_options=["1=1c.3g.20gb,2c.3g.20gb", "0=1c.1g.5gb,3c.3g.20gb"])
    small, two = host.gpus[1].migs
    assert (small.name, small.profile.name, small.compute_slices) == ("1c.3g.20gb", "3g.20gb", 1)
    assert (two.name, two.compute_slices) == ("2c.3g.20gb", 2)
    assert (small.gi, small.ci, small.placement_start, small.placement_size) == (1, 0, 0, 4)   # the GI's placement
    assert [m.name for m in host.gpus[0].migs] == ["1g.5gb", "3g.20gb"]   # C = its slices: the ordinary one
    data = host.to_json()["gpus"][1]["mig_devices"]
    assert [(m["profile"], m["profile_id"], m["ci_slices"]) for m in data] == [("1c.3g.20gb", 9, 1), ("2c.3g.20gb", 9, 2)]
