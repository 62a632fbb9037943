"""config.toml: path rules, every default, types checked, unknown keys warned about, broken files."""
import logging

import pytest

from cdi.config import Config, config_path, load_config
from cdi.errors import ConfigError


def test_path_rules(tmp_path):
    assert str(config_path({})) == "/etc/nvidia-container-runtime/config.toml"
    assert str(config_path({"XDG_CONFIG_HOME": "/x"})) == "/x/nvidia-container-runtime/config.toml"
    assert str(config_path({"XDG_CONFIG_HOME": "/x", "NVIDIA_CTK_CONFIG_FILE_PATH": "/c.toml"})) == "/c.toml"


def test_missing_file_means_defaults(tmp_path):
    config = load_config(environ={"NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml")})
    assert config == Config()
    assert config.accept_envvar_unprivileged is True
    assert config.accept_volume_mounts is False
    assert config.disable_require is False
    assert config.supported_driver_capabilities == "compat32,compute,display,graphics,ngx,utility,video"
    assert config.swarm_resource == ""
    cli = config.nvidia_container_cli
    assert (cli.root, cli.load_kmods, cli.no_cgroups, cli.ldconfig) == ("", True, False, "@/sbin/ldconfig")
    runtime = config.nvidia_container_runtime
    assert (runtime.debug, runtime.log_level, runtime.runtimes, runtime.mode) == ("/dev/null", "info",
                                                                                 ("runc", "crun"), "auto")
    assert config.cdi.spec_dirs == ("/etc/cdi", "/var/run/cdi")
    assert config.cdi.default_kind == "nvidia.com/gpu"
    assert config.cdi.annotation_prefixes == ("cdi.k8s.io/",)
    assert config.features == frozenset()


def test_env_variable_is_honoured(tmp_path, monkeypatch):
    path = tmp_path / "c.toml"
    path.write_text('disable-require = true\n')
    monkeypatch.setenv("NVIDIA_CTK_CONFIG_FILE_PATH", str(path))
    config = load_config()
    assert config.disable_require is True and config.source == str(path)


def test_full_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('''
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
supported-driver-capabilities = "utility,compute"
swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
root = "/run/nvidia/driver"
environment = ["A=1"]
ldconfig = "@/usr/sbin/ldconfig.real"
load-kmods = false

[nvidia-container-runtime]
log-level = "debug"
runtimes = ["crun"]
mode = "cdi"
modes.cdi.default-kind = "example.com/gpu"
modes.cdi.spec-dirs = ["/a", "/b"]

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "mount"

[nvidia-container-runtime-hook]
skip-mode-detection = true

[features]
allow-cuda-compat-libs-from-container = true
disable-cuda-compat-lib-hook = false
''')
    config = load_config(path)
    assert config.accept_envvar_unprivileged is False and config.accept_volume_mounts is True
    assert config.swarm_resource == "DOCKER_RESOURCE_GPU"
    assert config.nvidia_container_cli.root == "/run/nvidia/driver"
    assert config.nvidia_container_cli.environment == ("A=1",)
    assert config.nvidia_container_cli.load_kmods is False
    assert config.host_ldconfig() == "/usr/sbin/ldconfig.real"
    assert config.nvidia_container_runtime.mode == "cdi"
    assert config.cdi.spec_dirs == ("/a", "/b") and config.cdi.default_kind == "example.com/gpu"
    assert config.nvidia_container_runtime.modes.legacy.cuda_compat_mode == "mount"
    assert config.nvidia_container_runtime_hook.skip_mode_detection is True
    assert config.feature("allow-cuda-compat-libs-from-container")
    assert not config.feature("disable-cuda-compat-lib-hook")


def test_unknown_keys_are_warned_about(tmp_path, caplog):
    path = tmp_path / "c.toml"
    path.write_text('bogus = 1\n[nvidia-container-cli]\nwhat = "x"\n[features]\nfuture-thing = true\n')
    with caplog.at_level(logging.WARNING):
        config = load_config(path)
    text = caplog.text
    assert "bogus" in text and "nvidia-container-cli.what" in text and "features.future-thing" in text
    assert config.feature("future-thing")


@pytest.mark.parametrize("value", ['"yes"', "1", "[1]", "{ a = 1 }", "2024-01-01"])
def test_an_unknown_feature_never_blocks_whatever_its_value(tmp_path, caplog, value):
    """A newer toolkit's flag with a string (or any) value is a warning, as every unknown key is (it was
    the warning, then an error that failed every GPU container)."""
    path = tmp_path / "c.toml"
    path.write_text(f"[features]\nfuture-thing = {value}\nallow-ldconfig-from-container = true\n")
    with caplog.at_level(logging.WARNING):
        config = load_config(path)
    assert "unknown feature features.future-thing ignored" in caplog.text
    assert config.features == frozenset({"allow-ldconfig-from-container"})


@pytest.mark.parametrize("content, message", [
    ("x = [", "invalid TOML"),
    ('disable-require = "yes"', "disable-require must be a boolean"),
    ('[nvidia-container-runtime]\nruntimes = "runc"', "nvidia-container-runtime.runtimes must be a list"),
    ('[nvidia-container-runtime]\nruntimes = [1]', "must be a list of strings"),
    ('[nvidia-container-runtime]\nmode = "magic"', "mode must be one of"),
    ('[nvidia-container-runtime]\nlog-level = "loud"', "log-level must be one of"),
    ('nvidia-container-cli = 1', "nvidia-container-cli must be a table"),
    ('[nvidia-container-runtime.modes.cdi]\ndefault-kind = "no-slash"', "default-kind"),
    ('[features]\nallow-ldconfig-from-container = "yes"', "features.allow-ldconfig-from-container"),
    ('features = 1', "features must be a table"),
    ("swarm-resource = " + "9" * 5000, "invalid TOML"),
    ("a = " + "[" * 5000, "invalid TOML"),
])
def test_broken_files_are_one_clear_error(tmp_path, content, message):
    path = tmp_path / "c.toml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_unreadable_and_binary_files(tmp_path):
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(tmp_path / "bin.toml")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path)  # a directory


def test_container_ldconfig_is_refused_even_when_allowed(tmp_path):
    """NVIDIA runs the image's ldconfig when the feature is set; we refuse it either way (it would run as
    root in the host's namespaces: cdi.config.ldconfig_host_path). It used to come back as a HOST path."""
    path = tmp_path / "c.toml"
    path.write_text('[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"\n')
    with pytest.raises(ConfigError, match="container image; use '@/sbin/ldconfig'"):
        load_config(path).host_ldconfig()
    path.write_text('[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"\n[features]\nallow-ldconfig-from-container = true\n')
    with pytest.raises(ConfigError, match="refuses that even with features.allow-ldconfig-from-container") as err:
        load_config(path).host_ldconfig()
    assert err.value.where == str(path)
    path.write_text('[nvidia-container-cli]\nldconfig = "@/usr/sbin/ldconfig.real"\n')
    assert load_config(path).host_ldconfig() == "/usr/sbin/ldconfig.real"
