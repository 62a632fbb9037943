"""The request resolver: precedence, every id form, capabilities, privileged-only variables, and
hostile input (always a RequestError naming the offender, never a traceback)."""

import pytest

from cdi.config import Config, parse_config
from cdi.errors import RequestError, RequirementError
from cdi.record import replace
from cdi.request import container_env, is_privileged, resolve_device_request

DEFAULT = Config()


def oci(*env, privileged=False, annotations=None, mounts=None):
    spec = {"process": {"env": list(env),
                        "capabilities": {"bounding": ["CAP_CHOWN"] + (["CAP_SYS_ADMIN"] if privileged else [])}}}
    if annotations is not None:
        spec["annotations"] = annotations
    if mounts is not None:
        spec["mounts"] = mounts
    return spec


def request(*env, config=DEFAULT, **kw):
    return resolve_device_request(oci(*env, **kw), config)


def test_last_occurrence_of_a_variable_wins():
    spec = oci("NVIDIA_VISIBLE_DEVICES=all", "X=1", "NVIDIA_VISIBLE_DEVICES=0,1")
    assert container_env(spec)["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert resolve_device_request(spec, DEFAULT).devices == ("0", "1")


@pytest.mark.parametrize("env, gpu, devices", [
    ((), False, ()),
    (("NVIDIA_VISIBLE_DEVICES=",), False, ()),
    (("NVIDIA_VISIBLE_DEVICES=void",), False, ()),
    (("NVIDIA_VISIBLE_DEVICES=0,void",), False, ()),
    (("NVIDIA_VISIBLE_DEVICES=none",), True, ()),
    (("NVIDIA_VISIBLE_DEVICES=all",), True, ("all",)),
    (("NVIDIA_VISIBLE_DEVICES= 0 , 1,,0 ",), True, ("0", "1")),
    (("CUDA_VERSION=9.0",), True, ("all",)),                                   # legacy image
    (("CUDA_VERSION=12.0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"), False, ()),     # not legacy
    (("CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES="), False, ()),
])
def test_visible_devices_values(env, gpu, devices):
    result = request(*env)
    assert (result.is_gpu_container, result.devices) == (gpu, devices)
    assert result.source == ("env" if gpu else "")


@pytest.mark.parametrize("device_id", [
    "0", "15", "GPU-8b5a6e1c-1234-5678-9abc-def012345678", "gpu-8B5A6E1C-1234", "MIG-aa11-bb22", "mig-AA11",
    "00000000:07:00.0", "0000:07:00.0", "07:00.0", "0:1", "nvidia.com/gpu=0", "nvidia.com/gpu=all",
    "vendor.example/cls=dev0",
])
def test_every_id_form_is_accepted(device_id):
    assert request(f"NVIDIA_VISIBLE_DEVICES={device_id}").devices == (device_id,)


@pytest.mark.parametrize("value, fragment", [
    ("../../etc/passwd", "malformed device id '../../etc/passwd'"),
    ("..", "malformed device id '..'"),
    ("0/1", "unknown device id '0/1'"),
    ("/dev/nvidia0", "unknown device id '/dev/nvidia0'"),
    ("0\n1", "malformed device id '0\\n1'"),
    ("a\x1b[31m", "malformed device id 'a\\x1b[31m'"),
    ("0\x7f", "malformed device id"),
    ("M\u0131G-aa11", "malformed device id"),         # dotless i: would fold to MIG
    ("\u0660", "malformed device id"),                 # Arabic-Indic zero
    ("GPU-aa11\u202e", "malformed device id"),         # right-to-left override
    ("9" * 300, "longer than 256"),
    ("GPU-zz", "unknown device id 'GPU-zz'"),
    ("gpu0", "unknown device id 'gpu0'"),
    ("nvidia.com/gpu=../x", "malformed device id 'nvidia.com/gpu=../x'"),
    ("nvidia.com/gpu=a b", "malformed device id"),
    ("all,0", "cannot be combined"),
    ("none,1", "cannot be combined"),
    (",".join(["0"] * 2000), "more than 1024"),
    ("x" * 300000, "too long"),
])
def test_hostile_and_unknown_ids_are_errors_naming_them(value, fragment):
    with pytest.raises(RequestError) as info:
        request(f"NVIDIA_VISIBLE_DEVICES={value}")
    message = str(info.value)
    assert fragment in message and message.endswith("(NVIDIA_VISIBLE_DEVICES)")
    assert "\n" not in message and "\x1b" not in message and len(message) < 400


def test_annotations_take_precedence():
    result = request("NVIDIA_VISIBLE_DEVICES=1",
                     annotations={"cdi.k8s.io/b": "nvidia.com/gpu=1", "cdi.k8s.io/a": "nvidia.com/gpu=0, x.com/y=z",
                                  "other/key": "nvidia.com/gpu=7"})
    assert (result.source, result.devices) == ("annotation", ("nvidia.com/gpu=0", "x.com/y=z", "nvidia.com/gpu=1"))
    assert result.cdi_device_names() == ["nvidia.com/gpu=0", "x.com/y=z", "nvidia.com/gpu=1"]


def test_too_many_annotated_devices():
    with pytest.raises(RequestError, match="more than 1024"):
        request(annotations={"cdi.k8s.io/x": ",".join(f"nvidia.com/gpu={i}" for i in range(1100))})


def test_configured_annotation_prefixes():
    config = parse_config('[nvidia-container-runtime.modes.cdi]\nannotation-prefixes = ["example.io/"]\n', "c")
    result = resolve_device_request(oci(annotations={"cdi.k8s.io/a": "nvidia.com/gpu=0",
                                                     "example.io/x": "nvidia.com/gpu=1"}), config)
    assert result.devices == ("nvidia.com/gpu=1",)


@pytest.mark.parametrize("value", ["0", "nvidia.com/gpu", "nvidia.com/gpu=../x", "a/b=c d", "a/b=c\x00"])
def test_bad_annotation_values_are_errors(value):
    with pytest.raises(RequestError) as info:
        request(annotations={"cdi.k8s.io/x": value})
    assert "(cdi.k8s.io/x)" in str(info.value)


MOUNTS_ON = replace(DEFAULT, accept_volume_mounts=True)


def device_mount(device_id, source="/dev/null"):
    return {"source": source, "destination": f"/var/run/nvidia-container-devices/{device_id}", "type": "bind"}


def test_volume_mounts_only_when_enabled():
    mounts = [device_mount("GPU-aa11"), device_mount("1"), device_mount("3", source="/etc/passwd")]
    assert request("NVIDIA_VISIBLE_DEVICES=0", mounts=mounts).devices == ("0",)
    result = request("NVIDIA_VISIBLE_DEVICES=0", mounts=mounts, config=MOUNTS_ON)
    assert (result.source, result.devices) == ("mount", ("GPU-aa11", "1"))
    # no device mounts: the environment still counts
    assert request("NVIDIA_VISIBLE_DEVICES=0", mounts=[], config=MOUNTS_ON).source == "env"


def test_special_mount_ids():
    assert request(mounts=[device_mount("all")], config=MOUNTS_ON).devices == ("all",)
    none = request(mounts=[device_mount("none")], config=MOUNTS_ON)
    assert none.is_gpu_container and none.devices == ()
    assert not request(mounts=[device_mount("void"), device_mount("0")], config=MOUNTS_ON).is_gpu_container
    with pytest.raises(RequestError, match="cannot be combined"):
        request(mounts=[device_mount("all"), device_mount("0")], config=MOUNTS_ON)


@pytest.mark.parametrize("device_id", ["..", "../x", "a/../../b", "x\x00", "nope"])
def test_hostile_mount_ids(device_id):
    with pytest.raises(RequestError):
        request(mounts=[device_mount(device_id)], config=MOUNTS_ON)


def test_unprivileged_env_request_refused_when_configured():
    config = replace(DEFAULT, accept_envvar_unprivileged=False)
    result = request("NVIDIA_VISIBLE_DEVICES=all", config=config)
    assert not result.is_gpu_container and result.devices == () and "refuses" in result.refused
    assert request("NVIDIA_VISIBLE_DEVICES=all", config=config, privileged=True).devices == ("all",)
    # the device plugin's mounts are still honoured
    mounts_config = replace(config, accept_volume_mounts=True)
    assert request("NVIDIA_VISIBLE_DEVICES=all", config=mounts_config, mounts=[device_mount("0")]).devices == ("0",)


def test_swarm_resource_variables_come_first():
    config = replace(DEFAULT, swarm_resource="DOCKER_RESOURCE_GPU, DOCKER_RESOURCE_OTHER")
    result = request("NVIDIA_VISIBLE_DEVICES=0", "DOCKER_RESOURCE_OTHER=GPU-aa,GPU-bb", config=config)
    assert (result.where, result.devices) == ("DOCKER_RESOURCE_OTHER", ("GPU-aa", "GPU-bb"))
    assert request("NVIDIA_VISIBLE_DEVICES=0", config=config).devices == ("0",)


@pytest.mark.parametrize("env, caps", [
    ((), {"utility", "compute"}),
    (("NVIDIA_DRIVER_CAPABILITIES=",), {"utility", "compute"}),
    (("NVIDIA_DRIVER_CAPABILITIES=utility",), {"utility"}),
    (("NVIDIA_DRIVER_CAPABILITIES=video",), {"video", "compute"}),
    (("NVIDIA_DRIVER_CAPABILITIES=display",), {"display", "graphics"}),
    (("NVIDIA_DRIVER_CAPABILITIES= graphics , utility ",), {"graphics", "utility"}),
    (("NVIDIA_DRIVER_CAPABILITIES=all",), {"compat32", "compute", "display", "graphics", "ngx", "utility", "video"}),
    (("CUDA_VERSION=9.0",), {"compat32", "compute", "display", "graphics", "ngx", "utility", "video"}),
])
def test_capabilities(env, caps):
    assert request("NVIDIA_VISIBLE_DEVICES=0", *env).capabilities == caps


def test_capabilities_limited_by_config():
    config = replace(DEFAULT, supported_driver_capabilities="utility,video")
    assert request("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all", config=config).capabilities == \
        {"utility", "video"}


def test_unknown_capability_is_an_error():
    with pytest.raises(RequestError, match="unknown driver capability 'gaming'"):
        request("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility,gaming")


def test_non_gpu_containers_never_fail_on_other_variables():
    result = request("NVIDIA_DRIVER_CAPABILITIES=gaming", "NVIDIA_REQUIRE_X=junk", "NVIDIA_MIG_CONFIG_DEVICES=all",
                     "NVIDIA_IMEX_CHANNELS=oops")
    assert not result.is_gpu_container


def test_mig_config_and_monitor_only_privileged():
    for name in ("NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"):
        with pytest.raises(RequestError, match="privileged") as info:
            request("NVIDIA_VISIBLE_DEVICES=0", f"{name}=all")
        assert info.value.where == name
    result = request("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=0,1",
                     privileged=True)
    assert (result.mig_config, result.mig_monitor) == (("all",), ("0", "1"))
    assert is_privileged(oci(privileged=True)) and not is_privileged({"process": {}}) and not is_privileged({})


@pytest.mark.parametrize("value, channels, all_", [
    ("", (), False), ("none", (), False), ("all", (), True), ("0,3, 3", (0, 3), False), ("1048575", (1048575,), False),
])
def test_imex_channels(value, channels, all_):
    result = request("NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_IMEX_CHANNELS={value}")
    assert (result.imex_channels, result.imex_all) == (channels, all_)


@pytest.mark.parametrize("value", ["1048576", "-1", "0x10", "1,,2", "a", "9" * 50])
def test_bad_imex_channels(value):
    with pytest.raises(RequestError, match="IMEX channel"):
        request("NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_IMEX_CHANNELS={value}")


def test_requirements_and_disable():
    result = request("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470",
                     "NVIDIA_REQUIRE_ARCH=arch>=8.0")
    assert [r.variable for r in result.requirements] == ["NVIDIA_REQUIRE_ARCH", "NVIDIA_REQUIRE_CUDA"]
    assert not result.disable_require
    assert request("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DISABLE_REQUIRE=true").disable_require
    assert not request("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DISABLE_REQUIRE=maybe").disable_require
    assert request("NVIDIA_VISIBLE_DEVICES=0", config=replace(DEFAULT, disable_require=True)).disable_require
    legacy = request("CUDA_VERSION=9.0.176")
    assert [str(r) for r in legacy.requirements] == ["cuda>=9.0"]
    with pytest.raises(RequirementError):
        request("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda~12")


def test_cdi_device_names():
    result = request("NVIDIA_VISIBLE_DEVICES=0,GPU-AB12-CD,MIG-Ef56,1:0,nvidia.com/gpu=1,vendor.example/c=d,0")
    assert result.cdi_device_names() == ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-ab12-cd", "nvidia.com/gpu=MIG-ef56",
                                         "nvidia.com/gpu=1:0", "nvidia.com/gpu=1", "vendor.example/c=d"]
    assert request("NVIDIA_VISIBLE_DEVICES=all").cdi_device_names("example.com/gpu") == ["example.com/gpu=all"]
    assert request("NVIDIA_VISIBLE_DEVICES=none").cdi_device_names() == []


@pytest.mark.parametrize("spec", [{}, {"process": None}, {"process": {"env": None}}, {"process": {"env": [1, "A"]}},
                                  {"annotations": None}, {"mounts": None}])
def test_odd_oci_specs_do_not_crash(spec):
    assert not resolve_device_request(spec, DEFAULT).is_gpu_container
