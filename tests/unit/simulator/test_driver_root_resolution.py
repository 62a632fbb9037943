"""cdi.driver_root: which driver root is used, and where a simulated root's dev/proc/sys are."""
from __future__ import annotations

import pytest

from cdi.driver_root import SIMULATED_HOST_MARKER, DriverRoot, DriverRootError, resolve_driver_root


@pytest.fixture
def roots(tmp_path):
    cli, env, config = (tmp_path / n for n in ("cli", "env", "config"))
    for d in (cli, env, config):
        d.mkdir()
    return str(cli), str(env), str(config)


def test_order_is_flag_then_env_then_config_then_slash(roots):
    cli, env, config = roots
    environ = {"NVIDIA_CTK_DRIVER_ROOT": env}
    assert resolve_driver_root(cli, config, environ).path == cli
    assert resolve_driver_root(None, config, environ).path == env
    assert resolve_driver_root("", config, {"NVIDIA_CTK_DRIVER_ROOT": ""}).path == config
    assert resolve_driver_root(None, None, {}).path == "/"


def test_a_bad_root_names_where_it_came_from(tmp_path):
    with pytest.raises(DriverRootError) as err:
        resolve_driver_root(None, None, {"NVIDIA_CTK_DRIVER_ROOT": str(tmp_path / "nope")})
    assert "NVIDIA_CTK_DRIVER_ROOT" in err.value.where and "nope" in err.value.where


def test_only_a_marked_root_supplies_dev_proc_and_sys(tmp_path):
    plain = DriverRoot(str(tmp_path))
    assert not plain.is_simulated
    assert plain.dev_path("nvidiactl") == "/dev/nvidiactl"
    assert plain.proc_path("driver/nvidia-caps/mig-minors") == "/proc/driver/nvidia-caps/mig-minors"
    (tmp_path / SIMULATED_HOST_MARKER).write_text("{}")
    marked = DriverRoot(str(tmp_path))
    assert marked.is_simulated
    assert marked.dev_path("nvidia-caps/nvidia-cap3") == f"{tmp_path}/dev/nvidia-caps/nvidia-cap3"
    assert marked.proc_path("/driver/nvidia/version") == f"{tmp_path}/proc/driver/nvidia/version"
    assert marked.sys_path("module/nvidia/version") == f"{tmp_path}/sys/module/nvidia/version"
    assert not DriverRoot("/").is_simulated
