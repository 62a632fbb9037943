"""Resource names and counts per MIG strategy, as NVIDIA's plugin gives them, on simulated hosts."""
import re

import pytest

from cdi.inventory import Gpu, Inventory
from device_plugin.config import ConfigError, resolve
from device_plugin.main import parse_args
from device_plugin.resources import ResourceError, build_resources, mig_resource_name


def _names(resources):
    return {r.name: len(r.devices) for r in resources}


def test_none_offers_every_gpu_whole_even_in_mig_mode(sim_hosts):
    assert _names(build_resources(sim_hosts["plain"][1], "none")) == {"nvidia.com/gpu": 2}
    assert _names(build_resources(sim_hosts["mig-one"][1], "none")) == {"nvidia.com/gpu": 2}


def test_mixed_offers_mig_devices_by_profile_and_never_a_mig_gpu_whole(sim_hosts):
    inventory = sim_hosts["mig-one"][1]
    resources = build_resources(inventory, "mixed")
    assert _names(resources) == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 2}
    gpu = next(r for r in resources if r.name == "nvidia.com/gpu")
    assert [d.uuid for d in gpu.devices] == [inventory.gpus[0].uuid]
    mig = next(r for r in resources if r.name == "nvidia.com/mig-1g.5gb")
    assert [d.index for d in mig.devices] == ["1:0", "1:1"]
    assert _names(build_resources(sim_hosts["mig-all-mixed"][1], "mixed")) == {
        "nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-1g.5gb": 1, "nvidia.com/mig-2g.10gb": 1}


def test_a_profile_with_attributes_is_its_own_resource_named_as_nvidia_does(sim_hosts):
    """`1g.5gb+me` (media extensions) is nvidia.com/mig-1g.5gb.me: a `+` is no part of a valid resource name."""
    inventory = sim_hosts["mig-media"][1]
    assert sorted(m.profile for g in inventory.gpus for m in g.mig_devices) == ["1g.5gb", "1g.5gb", "1g.5gb+me"]
    resources = build_resources(inventory, "mixed")
    assert _names(resources) == {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-1g.5gb.me": 1}
    media = next(r for r in resources if r.name == "nvidia.com/mig-1g.5gb.me")
    assert media.short_name == "mig-1g.5gb.me" and media.devices[0].mig.profile == "1g.5gb+me"
    with pytest.raises(ResourceError, match="must have one profile; this host has 1g.5gb, 1g.5gb\\+me"):
        build_resources(inventory, "single")


@pytest.mark.parametrize("profile, problem", [
    ("1g.5gb:me", "lower-case letters, digits"), ("1G.5GB", "lower-case letters, digits"),
    ("1g.5gb+", "starting and ending with a letter or digit"), ("1g." + "5" * 60 + "gb", "longer than 63")])
def test_a_profile_that_makes_no_valid_resource_name_is_refused_in_one_line(profile, problem):
    with pytest.raises(ResourceError, match=problem) as info:
        mig_resource_name(profile)
    assert f"MIG profile {profile!r}" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["nvidia.com/mig-1g.10gb+me", "nvidia.com/GPU", "nvidia.com/gpu_shared",
                                  "nvidia.com/" + "g" * 60])
def test_config_resource_names_are_checked_as_kubernetes_does(tmp_path, name):
    f = tmp_path / "c.yaml"
    f.write_text(f"version: v1\nsharing:\n  timeSlicing:\n    resources: [{{name: gpu, replicas: 2, rename: '{name}'}}]\n")
    _, given = parse_args(["--config-file", str(f)])
    with pytest.raises(ConfigError, match=re.escape(f"invalid resource name {name!r}")):
        resolve(given, {})


def test_single_offers_mig_devices_as_gpus(sim_hosts):
    resources = build_resources(sim_hosts["mig-all-same"][1], "single")
    assert _names(resources) == {"nvidia.com/gpu": 3}
    assert all(d.uuid.startswith("MIG-") for d in resources[0].devices)


def test_single_without_mig_falls_back_to_none(sim_hosts):
    assert _names(build_resources(sim_hosts["plain"][1], "single")) == {"nvidia.com/gpu": 2}


def test_single_refuses_a_mixed_host_clearly(sim_hosts):
    with pytest.raises(ResourceError, match="all GPUs must be in MIG mode or none; GPUs 0 are not"):
        build_resources(sim_hosts["mig-one"][1], "single")
    with pytest.raises(ResourceError, match="must have one profile; this host has 1g.5gb, 2g.10gb, 3g.20gb"):
        build_resources(sim_hosts["mig-all-mixed"][1], "single")


def test_a_mig_gpu_without_mig_devices_is_refused_under_mixed():
    gpu = Gpu(index=0, minor=0, uuid="GPU-a", name="A100", brand="Nvidia", pci_bus_id="00000000:07:00.0",
              architecture="Ampere", compute_capability="8.0", mig_enabled=True)
    with pytest.raises(ResourceError, match="GPU 0 is in MIG mode but has no MIG devices"):
        build_resources(Inventory(driver_version="550", cuda_version="12.4", gpus=(gpu,)), "mixed")


def test_device_ids_per_strategy(sim_hosts):
    inventory = sim_hosts["mig-one"][1]
    mig = next(r for r in build_resources(inventory, "mixed") if r.name.startswith("nvidia.com/mig-"))
    device = mig.devices[1]
    assert device.device_id("uuid") == inventory.gpus[1].mig_devices[1].uuid
    assert device.device_id("index") == "1:1"
