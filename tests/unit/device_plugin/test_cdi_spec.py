"""Every CDI name the plugin can hand out is a device of the spec it writes (--cdi-root), per MIG strategy
and id strategy, on a host with a GPU in MIG mode; without such a GPU offered whole, the spec is exactly
`nvidia-ctk cdi generate`'s default."""
import pytest

from cdi.generate import generate_spec
from device_plugin.allocate import cdi_name
from device_plugin.cdi_spec import spec_device_ids
from device_plugin.resources import build_resources


@pytest.mark.parametrize("mig_strategy", ["none", "mixed"])
def test_every_name_handed_out_is_in_the_spec(sim_hosts, mig_strategy):
    root, inventory = sim_hosts["mig-one"]
    resources = build_resources(inventory, mig_strategy)
    ids = spec_device_ids(inventory, resources)
    spec = generate_spec(str(root), inventory, device_ids=ids)
    names = {f"{spec.kind}={d.name}" for d in spec.devices}
    for resource in resources:
        for device in resource.devices:
            for strategy in ("uuid", "index"):
                assert cdi_name(device.device_id(strategy)) in names
    if mig_strategy == "mixed":
        assert ids == ()   # the default spec
    else:
        assert ids == ("0", "1:0", "1:1", "1")
