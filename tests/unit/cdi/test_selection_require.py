"""Mapping requested ids onto an inventory, and NVIDIA_REQUIRE_* per selected GPU."""
import pytest

from cdi.config import Config
from cdi.errors import RequestError, RequirementError
from cdi.inventory import Gpu, Inventory, MigDevice
from cdi.request import resolve_device_request
from cdi.require import check_requirements, parse_requirement
from cdi.selection import normalize_pci_bus_id, select_and_check, select_devices

MIG = MigDevice(parent_index=0, index=0, uuid="MIG-11112222-3333-4444-5555-666677778888", gi=1, ci=0,
                profile="1g.5gb", gi_cap_minor=12, ci_cap_minor=13)
A100 = Gpu(index=0, minor=0, uuid="GPU-aaaa1111-2222-3333-4444-555566667777", name="NVIDIA A100", brand="Tesla",
           pci_bus_id="00000000:07:00.0", architecture="Ampere", compute_capability="8.0", mig_enabled=True,
           mig_devices=(MIG,))
T4 = Gpu(index=1, minor=1, uuid="GPU-bbbb1111-2222-3333-4444-555566667777", name="Tesla T4", brand="Tesla",
         pci_bus_id="00000000:0A:00.0", architecture="Turing", compute_capability="7.5")
RTX = Gpu(index=2, minor=4, uuid="GPU-cccc1111-2222-3333-4444-555566667777", name="RTX A6000", brand="NvidiaRTX",
          pci_bus_id="00000000:41:00.0", architecture="Ampere", compute_capability="8.6")
INVENTORY = Inventory(driver_version="550.54.15", cuda_version="12.4", gpus=(A100, T4, RTX))


def select(value, *env):
    spec = {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={value}", *env]}}
    return select_and_check(resolve_device_request(spec, Config()), INVENTORY)


@pytest.mark.parametrize("value, gpus, migs", [
    # `all`: every GPU not in MIG mode, then every MIG device (the A100 is in MIG mode: its MIG device)
    ("all", [1, 2], [MIG.uuid]),
    ("0", [0], []),               # a GPU in MIG mode named by itself is still that GPU
    ("none", [], []),
    ("1", [1], []),
    ("2,0", [2, 0], []),
    ("GPU-BBBB1111-2222-3333-4444-555566667777", [1], []),
    ("gpu-cccc1111-2222-3333-4444-555566667777", [2], []),
    ("00000000:0a:00.0", [1], []),
    ("0000:0A:00.0", [1], []),
    ("41:00.0", [2], []),
    ("0:0", [], [MIG.uuid]),
    ("mig-11112222-3333-4444-5555-666677778888", [], [MIG.uuid]),
    ("nvidia.com/gpu=1", [1], []),
    ("nvidia.com/gpu=all", [1, 2], [MIG.uuid]),
    ("nvidia.com/gpu=0:0", [], [MIG.uuid]),
    ("1,GPU-bbbb1111-2222-3333-4444-555566667777,1", [1], []),
])
def test_ids_select_devices(value, gpus, migs):
    selection = select(value)
    assert [g.index for g in selection.gpus] == gpus
    assert [m.uuid for m in selection.mig_devices] == migs


def test_all_is_what_a_generated_spec_lists_and_brings_every_gpu_node():
    """One meaning of `all` for every mode: the resolver (jit-cdi, legacy, nvidia-container-cli) and
    the spec's devices (cdi mode's nvidia.com/gpu=all) come from Inventory.all_devices."""
    from cdi.generate import select_generate_devices

    selection = select("all")
    assert list(selection.gpus) + list(selection.mig_devices) == INVENTORY.all_devices() \
        == select_generate_devices(INVENTORY)
    assert selection.all_gpus(INVENTORY) == (T4, RTX, A100)   # the MIG parent's node comes along


def test_mig_device_brings_its_parent():
    selection = select("0:0")
    assert selection.parent_gpus(INVENTORY) == (A100,)
    assert selection.all_gpus(INVENTORY) == (A100,)


@pytest.mark.parametrize("value, fragment", [
    ("3", "unknown device id '3'"),
    ("1:0", "unknown device id '1:0'"),
    ("0:5", "unknown device id '0:5'"),
    ("GPU-dead", "unknown device id 'GPU-dead'"),
    ("MIG-dead", "unknown device id 'MIG-dead'"),
    ("00000000:99:00.0", "unknown device id '00000000:99:00.0'"),
    ("vendor.example/cls=0", "not of kind nvidia.com/gpu"),
    ("nvidia.com/gpu=custom", "unknown device id 'nvidia.com/gpu=custom'"),
    ("nvidia.com/gpu=none", "unknown device id 'nvidia.com/gpu=none'"),
])
def test_unknown_ids_name_themselves(value, fragment):
    with pytest.raises(RequestError) as info:
        select(value)
    assert fragment in str(info.value) and "NVIDIA_VISIBLE_DEVICES" in str(info.value)


@pytest.mark.parametrize("value, message", [
    # docker run --gpus 5 writes NVIDIA_VISIBLE_DEVICES=0,1,2,3,4: the message names what the user typed
    ("0,1,2,3,4", "5 GPUs asked for (docker --gpus 5, or NVIDIA_VISIBLE_DEVICES=0,1,2,3,4): "
                  "this host has 3 GPUs (0-2); ask for fewer"),
    ("7", "unknown device id '7': GPU index 7 out of range, this host has 3 GPUs (0-2), "
          "from docker --gpus or NVIDIA_VISIBLE_DEVICES"),
])
def test_an_index_out_of_range_says_how_many_gpus_the_host_has(value, message):
    """Issue 27.5: `docker run --gpus 5` on a smaller host said only "unknown device id '3'
    (NVIDIA_VISIBLE_DEVICES)", a variable the user never set."""
    with pytest.raises(RequestError) as info:
        select(value)
    assert (info.value.what, info.value.where) == (message, "NVIDIA_VISIBLE_DEVICES")


def test_an_index_on_a_host_without_gpus():
    request = resolve_device_request({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}, Config())
    with pytest.raises(RequestError, match="GPU index 0 out of range, this host has no GPU"):
        select_devices(request, Inventory(driver_version="550.54.15", cuda_version="12.4", gpus=()))


def test_pci_normalisation():
    assert normalize_pci_bus_id("0A:00.0") == "00000000:0a:00.0"
    assert normalize_pci_bus_id("0001:0A:00.1") == "00000001:0a:00.1"


@pytest.mark.parametrize("value, gpu, holds", [
    ("cuda>=12.0", A100, True),
    ("cuda>=12.5", A100, False),
    ("cuda>12.4", A100, False),
    ("cuda=12.4", A100, True),
    ("cuda!=12.4", A100, False),
    ("driver>=550", A100, True),
    ("driver<550.54.16", A100, True),
    ("driver>=470 driver<400", A100, True),        # OR
    ("driver>=470,driver<471", A100, False),       # AND
    ("arch>=8.0", T4, False),
    ("arch<8", T4, True),
    ("arch=8.6", RTX, True),
    ("brand=tesla", A100, True),
    ("brand=TESLA", T4, True),
    ("brand=nvidiartx", RTX, True),
    ("brand!=tesla", RTX, True),
    ("cuda>=13.0 brand=tesla,driver>=470,driver<471 brand=nvidiartx,driver>=550", RTX, True),
    ("cuda>=13.0 brand=tesla,driver>=470,driver<471 brand=nvidiartx,driver>=550", T4, False),
    ("arch>=9.0", None, True),                     # no GPU selected: nothing to contradict
    ("cuda>=13", None, False),
])
def test_requirement_evaluation(value, gpu, holds):
    assert parse_requirement("NVIDIA_REQUIRE_X", value).holds(INVENTORY, gpu) is holds


@pytest.mark.parametrize("value, fragment", [
    ("cuda", "malformed requirement"),
    ("cuda>=", "malformed version"),
    ("cuda>=12.x", "malformed version"),
    ("cuda=>12", "malformed version"),
    ("brand>=tesla", "brand takes only"),
    ("brand=te sla", "malformed requirement"),
    ("brand=a/b", "malformed brand"),
    ("memory>=16", "unknown requirement key 'memory'"),
    ("cuda>=1" + "0" * 5000, "longer than"),
])
def test_malformed_requirements(value, fragment):
    with pytest.raises(RequirementError) as info:
        parse_requirement("NVIDIA_REQUIRE_CUDA", value)
    assert fragment in str(info.value) and "NVIDIA_REQUIRE_CUDA" in str(info.value)


def test_every_selected_gpu_must_meet_every_requirement():
    select("0,2", "NVIDIA_REQUIRE_ARCH=arch>=8.0")
    with pytest.raises(RequirementError) as info:
        select("0,1", "NVIDIA_REQUIRE_ARCH=arch>=8.0")
    assert "GPU 1" in str(info.value) and "arch 7.5" in str(info.value)
    with pytest.raises(RequirementError):
        select("all", "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_REQUIRE_BRAND=brand=tesla")


def test_mig_devices_are_checked_by_their_parent():
    select("0:0", "NVIDIA_REQUIRE_ARCH=arch>=8.0")
    with pytest.raises(RequirementError):
        select("0:0", "NVIDIA_REQUIRE_ARCH=arch>=9.0")


def test_disable_require_skips_checks():
    select("1", "NVIDIA_REQUIRE_ARCH=arch>=9.0", "NVIDIA_DISABLE_REQUIRE=1")


def test_legacy_cuda_version_requirement():
    spec = {"process": {"env": ["CUDA_VERSION=13.1.0"]}}
    with pytest.raises(RequirementError, match="cuda>=13.1"):
        select_and_check(resolve_device_request(spec, Config()), INVENTORY)
    with pytest.raises(RequirementError, match="malformed CUDA_VERSION"):
        resolve_device_request({"process": {"env": ["CUDA_VERSION=latest"]}}, Config())


def test_unknown_facts_never_satisfy_a_version():
    unknown = Inventory(driver_version="", cuda_version="", gpus=(T4,))
    with pytest.raises(RequirementError, match="cuda \\?"):
        check_requirements([parse_requirement("NVIDIA_REQUIRE_CUDA", "cuda>=1.0")], unknown, [T4])


def test_select_without_check():
    spec = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"]}}
    selection = select_devices(resolve_device_request(spec, Config()), INVENTORY)
    assert selection.gpus == (T4,)
