"""Settings from flags, environment and NVIDIA's config file v1; bad files are one clear error."""
import pytest

from device_plugin.config import ConfigError, resolve
from device_plugin.main import parse_args


def _config(argv=(), env=None):
    _, given = parse_args(list(argv))
    return resolve(given, env or {})


def test_defaults_are_nvidias():
    c = _config()
    assert (c.mig_strategy, c.fail_on_init_error, c.nvidia_driver_root, c.pass_device_specs) == ("none", True, "/", False)
    assert (c.device_list_strategy, c.device_id_strategy, c.cdi_annotation_prefix) == (["envvar"], "uuid", "cdi.k8s.io/")


def test_flag_beats_environment_beats_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("version: v1\nflags:\n  migStrategy: single\n  failOnInitError: false\n"
                 "  plugin:\n    deviceListStrategy: [cdi-cri, envvar]\n    deviceIDStrategy: index\n")
    c = _config(["--config-file", str(f)])
    assert (c.mig_strategy, c.fail_on_init_error, c.device_list_strategy, c.device_id_strategy) == \
        ("single", False, ["cdi-cri", "envvar"], "index")
    c = _config(["--config-file", str(f)], {"MIG_STRATEGY": "mixed", "DEVICE_LIST_STRATEGY": "volume-mounts,cdi-annotations"})
    assert (c.mig_strategy, c.device_list_strategy) == ("mixed", ["volume-mounts", "cdi-annotations"])
    c = _config(["--config-file", str(f), "--mig-strategy=none", "--fail-on-init-error", "--device-list-strategy",
                 "envvar"], {"MIG_STRATEGY": "mixed"})
    assert (c.mig_strategy, c.fail_on_init_error, c.device_list_strategy) == ("none", True, ["envvar"])


def test_config_file_from_environment_and_booleans_as_go_reads_them(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("version: v1\nflags:\n  plugin:\n    passDeviceSpecs: true\n")
    assert _config(env={"CONFIG_FILE": str(f)}).pass_device_specs is True
    assert _config(["--pass-device-specs=F"]).pass_device_specs is False
    with pytest.raises(ConfigError, match="invalid boolean 'maybe'"):
        _config(env={"PASS_DEVICE_SPECS": "maybe"})


@pytest.mark.parametrize("text, message", [
    ("version: v1\nflags:\n  migStategy: mixed\n", r"unknown key 'migStategy' \(flags.migStategy\)"),
    ("version: v1\nflags:\n  plugin:\n    deviceListStrategi: envvar\n", r"unknown key 'deviceListStrategi'"),
    ("version: v1\nflag: {}\n", r"unknown key 'flag'"),
    ("version: v2\n", r"unsupported config version 'v2'"),
    ("version: v1\nflags: [\n", r"not valid YAML at line"),
    ("- a\n", r"must be a mapping"),
    ("version: v1\nflags:\n  migStrategy: 3\n", r"expected a string, got int"),
    ("version: v1\nflags:\n  migStrategy: all\n", r"invalid mig-strategy 'all'"),
    ("version: v1\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n",
     r"^using MPS needs --cdi-root: the plugin writes a CDI device per share there \(sharing.mps\)$"),
    ("version: v1\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replica: 2}]\n",
     r"unknown key 'replica' \(sharing.mps.resources\[0\].replica\)"),
    ("version: v1\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 101}]\n",
     r"MPS replicas must be at most 100 .*got 101 \(.*: sharing.mps.resources\[0\].replicas\)"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replica: 2}]\n",
     r"unknown key 'replica' \(sharing.timeSlicing.resources\[0\].replica\)"),
    ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefaults: true\n    resources: [{name: gpu, replicas: 2}]\n",
     r"unknown key 'renameByDefaults' \(sharing.timeSlicing.renameByDefaults\)"),
    ("version: v1\nsharing:\n  timeslicing: {}\n", r"unknown key 'timeslicing' \(sharing.timeslicing\)"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu}]\n", r"no replicas specified"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 0}]\n",
     r"number of replicas must be a whole number > 0, got 0"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: []\n", r"no resources specified"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: amd.com/gpu, replicas: 2}]\n",
     r"invalid resource name 'amd.com/gpu'"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: some}]\n",
     r"devices set as 'some' but the only valid string input is 'all'"),
    ("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2, devices: 0}]\n",
     r"a count of devices must be > 0"),
])
def test_bad_config_files_are_one_clear_error(tmp_path, text, message):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        _config(["--config-file", str(f)])
    assert "\n" not in str(info.value)


def test_time_slicing_as_nvidias_config_spells_it(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                 "    failRequestsGreaterThanOne: true\n    resources:\n"
                 "    - {name: nvidia.com/gpu, replicas: 4}\n"
                 "    - {name: mig-1g.5gb, replicas: 2, rename: nvidia.com/small, devices: [0, '1:0', GPU-x]}\n"
                 "    - {name: nvidia.com/mig-2g.10gb, replicas: 3, devices: 1}\n")
    sharing = _config(["--config-file", str(f)]).time_slicing
    assert sharing.fail_requests_greater_than_one
    assert [(r.name, r.replicas, r.shared_name, r.devices) for r in sharing.resources] == [
        ("nvidia.com/gpu", 4, "nvidia.com/gpu.shared", "all"),
        ("nvidia.com/mig-1g.5gb", 2, "nvidia.com/small", ("0", "1:0", "GPU-x")),
        ("nvidia.com/mig-2g.10gb", 3, "nvidia.com/mig-2g.10gb.shared", 1)]
    assert _config().time_slicing is None


def _mps_file(tmp_path, extra: str = "") -> str:
    f = tmp_path / "mps.yaml"
    f.write_text(f"version: v1\nsharing:\n  mps:\n{extra}    resources:\n    - {{name: gpu, replicas: 2}}\n")
    return str(f)


def test_mps_as_nvidias_config_spells_it(tmp_path):
    """sharing.mps takes timeSlicing's keys; failRequestsGreaterThanOne is true unless the file says false
    (NVIDIA's default for MPS); sharing.mps wins over sharing.timeSlicing, as in NVIDIA's plugin."""
    cdi = ["--device-list-strategy", "cdi-cri", "--cdi-root", str(tmp_path / "cdi")]
    config = _config(["--config-file", _mps_file(tmp_path), *cdi])
    assert config.sharing is config.mps and config.mps.strategy == "mps"
    assert config.mps.fail_requests_greater_than_one and config.mps_root == "/run/nvidia/mps"
    assert [(r.name, r.replicas, r.shared_name) for r in config.mps.resources] == [("nvidia.com/gpu", 2, "nvidia.com/gpu")]
    relaxed = _config(["--config-file", _mps_file(tmp_path, "    failRequestsGreaterThanOne: false\n"), *cdi,
                       "--mps-root", str(tmp_path / "mps")])
    assert not relaxed.mps.fail_requests_greater_than_one and relaxed.mps_root == str(tmp_path / "mps")
    both = tmp_path / "both.yaml"
    both.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 4}]\n"
                    "  mps:\n    resources: [{name: gpu, replicas: 2}]\n")
    assert _config(["--config-file", str(both), *cdi]).sharing.strategy == "mps"


@pytest.mark.parametrize("args, message", [
    (["--mig-strategy", "mixed", "--device-list-strategy", "cdi-cri", "--cdi-root", "/c"],
     r"^using --mig-strategy=mixed is not supported with MPS \(sharing.mps\)$"),
    (["--device-list-strategy", "cdi-annotations"],
     r"^using MPS needs --cdi-root: the plugin writes a CDI device per share there \(sharing.mps\)$"),
    (["--device-list-strategy", "cdi-cri", "--cdi-root", "/c", "--mps-root", "run/mps"],
     r"^must be an absolute path \(--mps-root\)$"),
])
def test_mps_is_refused_where_nvidias_refuses_it(tmp_path, args, message):
    with pytest.raises(ConfigError, match=message):
        _config(["--config-file", _mps_file(tmp_path), *args])


def test_bad_values_are_refused():
    with pytest.raises(ConfigError, match="invalid device-list-strategy 'cdi'"):
        _config(["--device-list-strategy", "envvar,cdi"])
    with pytest.raises(ConfigError, match="invalid device-id-strategy 'serial'"):
        _config(env={"DEVICE_ID_STRATEGY": "serial"})
    with pytest.raises(ConfigError, match="cannot read the config file"):
        _config(["--config-file", "/nonexistent/c.yaml"])


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "oversize"])
def test_a_config_file_that_is_no_regular_file_is_refused_without_blocking(tmp_path, kind):
    import os

    f = tmp_path / "c.yaml"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "dev-zero":
        f.symlink_to("/dev/zero")
    else:
        f.write_text("#" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="cannot read the config file: (not a regular file|larger than)"):
        _config(["--config-file", str(f)])
