"""containerd: drop-in with the whole CRI section, one `imports` line in the main config, exact undo."""
import pytest
import tomlkit

from runtime_shim.engine_config import EngineConfigError, RuntimeRequest, apply_plan, plan_runtime_config
from runtime_shim.engine_config.containerd import default_drop_in

SHIM = "/opt/gct/bin/nvidia-container-runtime"
V2_PLUGIN = "io.containerd.grpc.v1.cri"
V3_PLUGIN = "io.containerd.cri.v1.runtime"

# a containerd 1.x config as a Kubernetes node keeps it: comments, systemd cgroups, a mirror, kata
V2_CONFIG = """# containerd config for the node pool (managed by hand)
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = -999

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.internal.example/pause:3.9"  # pinned
    max_container_log_line_size = 8192
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]
          runtime_type = "io.containerd.kata.v2"
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
      endpoint = ["https://mirror.internal.example"]
"""

# containerd 2.x layout (config version 3): runtimes live in the io.containerd.cri.v1.runtime plugin
V3_CONFIG = """version = 3
root = '/var/lib/containerd'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    # cdi stays off unless asked
    enable_cdi = false

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'

          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            BinaryName = ''
            SystemdCgroup = false
"""


@pytest.fixture
def cfg(tmp_path):
    return tmp_path / "config.toml"


def run(cfg, remove=False, drop_in=None, **kw):
    request = RuntimeRequest(runtime_path=SHIM, **kw)
    plan = plan_runtime_config("containerd", request, str(cfg), drop_in, remove=remove)
    apply_plan(plan)
    return plan


def drop_in_of(cfg):
    return cfg.parent / "conf.d" / "99-nvidia.toml"


def load(path):
    return tomlkit.parse(path.read_text()).unwrap()


def test_v2_drop_in_carries_the_whole_cri_section(cfg):
    cfg.write_text(V2_CONFIG)
    run(cfg)
    drop = load(drop_in_of(cfg))
    assert drop["version"] == 2
    cri = drop["plugins"][V2_PLUGIN]
    # every user setting of the section is there, since the import replaces the section as a whole
    assert cri["sandbox_image"] == "registry.internal.example/pause:3.9"
    assert cri["max_container_log_line_size"] == 8192
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"] == ["https://mirror.internal.example"]
    runtimes = cri["containerd"]["runtimes"]
    assert set(runtimes) == {"runc", "kata", "nvidia"}
    assert runtimes["runc"] == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    # copied from runc, running our shim
    assert runtimes["nvidia"] == {"runtime_type": "io.containerd.runc.v2",
                                  "options": {"SystemdCgroup": True, "BinaryName": SHIM}}
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert "enable_cdi" not in cri


def test_main_config_gains_exactly_one_import_line(cfg):
    cfg.write_text(V2_CONFIG)
    run(cfg)
    old, new = V2_CONFIG.splitlines(), cfg.read_text().splitlines()
    added = [line for line in new if line not in old]
    assert added == [f'imports = ["{drop_in_of(cfg)}"] # added by nvidia-ctk runtime configure']
    assert [line for line in new if line not in added] == old  # comments and layout intact
    assert load(cfg)["imports"] == [str(drop_in_of(cfg))]


def test_default_and_cdi(cfg):
    cfg.write_text(V2_CONFIG)
    run(cfg, set_as_default=True, enable_cdi=True)
    cri = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["enable_cdi"] is True


def test_v3_config(cfg):
    cfg.write_text(V3_CONFIG)
    run(cfg, set_as_default=True, enable_cdi=True)
    drop = load(drop_in_of(cfg))
    assert drop["version"] == 3
    assert set(drop["plugins"]) == {V3_PLUGIN}  # the images plugin is not touched
    section = drop["plugins"][V3_PLUGIN]
    assert section["enable_cdi"] is True
    assert section["enable_selinux"] is False
    assert section["containerd"]["default_runtime_name"] == "nvidia"
    assert section["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": SHIM, "SystemdCgroup": False}}
    assert section["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == ""
    run(cfg, remove=True)
    assert cfg.read_text() == V3_CONFIG
    assert not drop_in_of(cfg).exists()


def test_idempotent_and_remove_restores_bytes(cfg):
    cfg.write_text(V2_CONFIG)
    run(cfg, set_as_default=True, enable_cdi=True)
    main, drop = cfg.read_text(), drop_in_of(cfg).read_text()
    plan = run(cfg, set_as_default=True, enable_cdi=True)
    assert plan.pending == []
    assert (cfg.read_text(), drop_in_of(cfg).read_text()) == (main, drop)
    # a run without the flags keeps what an earlier run added
    assert run(cfg).pending == []
    run(cfg, remove=True)
    assert cfg.read_text() == V2_CONFIG
    assert not drop_in_of(cfg).exists()


def test_missing_config_is_created_and_removed(cfg):
    run(cfg)
    main = load(cfg)
    assert main == {"version": 2, "imports": [str(drop_in_of(cfg))]}
    cri = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]
    # no runtimes table before: ours replaces containerd's built-in list, so runc is spelled out
    assert cri["containerd"]["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v2"}
    assert cri["containerd"]["runtimes"]["nvidia"] == {"runtime_type": "io.containerd.runc.v2",
                                                       "options": {"BinaryName": SHIM}}
    run(cfg, remove=True)
    assert not cfg.exists()
    assert not drop_in_of(cfg).exists()


def test_empty_config_stays_a_file(cfg):
    cfg.write_text("")
    run(cfg)
    assert load(cfg)["version"] == 2
    run(cfg, remove=True)
    assert cfg.read_text() == ""


def test_config_without_cri_section(cfg):
    text = 'version = 2\n\n[grpc]\n  address = "/run/x.sock"\n'
    cfg.write_text(text)
    run(cfg)
    cri = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]
    assert set(cri["containerd"]["runtimes"]) == {"runc", "nvidia"}
    run(cfg, remove=True)
    assert cfg.read_text() == text


def test_section_from_another_import_is_the_base(cfg, tmp_path):
    other = tmp_path / "node.toml"
    other.write_text(f'version = 2\n[plugins."{V2_PLUGIN}"]\n  sandbox_image = "from-import"\n')
    text = V2_CONFIG.replace("oom_score = -999\n", 'oom_score = -999\nimports = ["node.toml"]\n')
    cfg.write_text(text)
    run(cfg)
    cri = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]
    assert cri["sandbox_image"] == "from-import"  # containerd loads the import after the main config
    assert load(cfg)["imports"] == ["node.toml", str(drop_in_of(cfg))]
    run(cfg, remove=True)
    assert cfg.read_text() == text


def test_existing_glob_import_is_reused(cfg):
    text = 'version = 2\nimports = ["conf.d/*.toml"]\n'
    cfg.write_text(text)
    run(cfg)
    assert cfg.read_text() == text
    assert drop_in_of(cfg).exists()
    run(cfg, remove=True)
    assert cfg.read_text() == text
    assert not drop_in_of(cfg).exists()


def test_glob_does_not_cross_directories(cfg):
    text = 'version = 2\nimports = ["/*.toml"]\n'
    cfg.write_text(text)
    run(cfg)
    assert load(cfg)["imports"] == ["/*.toml", str(drop_in_of(cfg))]


def test_rerun_refreshes_the_copy_after_the_user_edits_the_main_config(cfg):
    cfg.write_text(V2_CONFIG)
    run(cfg, set_as_default=True)
    cfg.write_text(cfg.read_text().replace("pause:3.9", "pause:3.10"))
    run(cfg)
    cri = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]
    assert cri["sandbox_image"] == "registry.internal.example/pause:3.10"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"  # the earlier run's default is kept


def test_two_runtime_names_and_removing_one(cfg):
    cfg.write_text(V2_CONFIG)
    run(cfg)
    run(cfg, name="nvidia-cdi", set_as_default=True)
    runtimes = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]["containerd"]["runtimes"]
    assert {"nvidia", "nvidia-cdi"} <= set(runtimes)
    run(cfg, remove=True, name="nvidia-cdi")
    cri = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]
    assert "nvidia-cdi" not in cri["containerd"]["runtimes"] and "nvidia" in cri["containerd"]["runtimes"]
    assert cri["containerd"]["default_runtime_name"] == "runc"
    run(cfg, remove=True)
    assert cfg.read_text() == V2_CONFIG
    assert not drop_in_of(cfg).exists()


def test_tables_split_across_the_file(cfg):
    text = f"""version = 2
[plugins."{V2_PLUGIN}".containerd]
  snapshotter = "native"
[grpc]
  address = "/run/x.sock"
[plugins."{V2_PLUGIN}"]
  sandbox_image = "split"
"""
    cfg.write_text(text)
    run(cfg)
    cri = load(drop_in_of(cfg))["plugins"][V2_PLUGIN]
    assert cri["sandbox_image"] == "split" and cri["containerd"]["snapshotter"] == "native"


def test_explicit_drop_in_path(cfg, tmp_path):
    cfg.write_text(V2_CONFIG)
    drop = tmp_path / "elsewhere" / "nvidia.toml"
    run(cfg, drop_in=str(drop))
    assert drop.exists() and load(cfg)["imports"] == [str(drop)]
    assert default_drop_in(str(cfg)) == str(drop_in_of(cfg))


@pytest.mark.parametrize("text, message", [
    ("version = 2\n[plugins\n", "invalid TOML"),
    ('[plugins."cri"]\n  x = 1\n', "config version 1 is not supported"),
    ("version = 7\n", "unsupported containerd config version 7"),
    ('version = 2\nimports = "x.toml"\n', "`imports` must be a list of paths"),
    ('version = 2\nimports = ["missing.toml"]\n', "imported config file does not exist"),
    (f'version = 2\n[plugins."{V2_PLUGIN}"]\n  containerd = 5\n', "is not a table"),
])
def test_broken_config_is_an_error_and_left_untouched(cfg, text, message):
    cfg.write_text(text)
    with pytest.raises(EngineConfigError) as err:
        plan_runtime_config("containerd", RuntimeRequest(runtime_path=SHIM), str(cfg))
    assert message in err.value.what
    assert cfg.read_text() == text
    assert not drop_in_of(cfg).exists()


def test_foreign_drop_in_is_not_overwritten(cfg):
    cfg.write_text(V2_CONFIG)
    drop_in_of(cfg).parent.mkdir()
    drop_in_of(cfg).write_text("# mine\nversion = 2\n")
    with pytest.raises(EngineConfigError, match="not written by nvidia-ctk"):
        plan_runtime_config("containerd", RuntimeRequest(runtime_path=SHIM), str(cfg))
    assert drop_in_of(cfg).read_text() == "# mine\nversion = 2\n"


def test_relative_runtime_path_is_refused(cfg):
    with pytest.raises(EngineConfigError, match="must be absolute"):
        plan_runtime_config("containerd", RuntimeRequest(runtime_path="nvidia-container-runtime"), str(cfg))


def test_plan_writes_drop_in_before_import_and_removes_import_first(cfg):
    cfg.write_text(V2_CONFIG)
    plan = plan_runtime_config("containerd", RuntimeRequest(runtime_path=SHIM), str(cfg))
    assert [c.path for c in plan.pending] == [str(drop_in_of(cfg)), str(cfg)]
    apply_plan(plan)
    plan = plan_runtime_config("containerd", RuntimeRequest(runtime_path=SHIM), str(cfg), remove=True)
    assert [(c.path, c.after is None) for c in plan.pending] == [(str(cfg), False), (str(drop_in_of(cfg)), True)]


def test_import_loaded_after_the_drop_in_is_an_error(cfg, tmp_path):
    (tmp_path / "conf.d").mkdir()
    later = tmp_path / "conf.d" / "99-zz-site.toml"
    later.write_text(f'version = 2\n[plugins."{V2_PLUGIN}"]\n  sandbox_image = "site"\n')
    earlier = tmp_path / "conf.d" / "10-site.toml"
    earlier.write_text(f'version = 2\n[plugins."{V2_PLUGIN}"]\n  sandbox_image = "early"\n')
    text = 'version = 2\nimports = ["conf.d/*.toml"]\n'
    cfg.write_text(text)
    with pytest.raises(EngineConfigError) as err:
        run(cfg)
    assert err.value.where == str(later) and "would replace ours" in err.value.what
    assert not drop_in_of(cfg).exists()
    later.unlink()
    run(cfg)  # only a file loaded before the drop-in: it is the base
    assert load(drop_in_of(cfg))["plugins"][V2_PLUGIN]["sandbox_image"] == "early"


def test_remove_works_even_when_a_later_import_shadows_the_drop_in(cfg, tmp_path):
    cfg.write_text('version = 2\nimports = ["conf.d/*.toml"]\n')
    run(cfg)
    (tmp_path / "conf.d" / "99-zz-site.toml").write_text(f'version = 2\n[plugins."{V2_PLUGIN}"]\n  x = 1\n')
    run(cfg, remove=True)
    assert not drop_in_of(cfg).exists()


def test_disabled_cri_plugin_is_reported(cfg):
    cfg.write_text('disabled_plugins = ["cri"]\n')  # as docker's containerd package ships it
    plan = run(cfg)
    assert any("CRI plugin is disabled" in note for note in plan.notes)
    assert load(drop_in_of(cfg))["plugins"][V2_PLUGIN]["containerd"]["runtimes"]["nvidia"]


def test_cdi_on_containerd_older_than_1_7_is_reported(cfg, monkeypatch):
    from runtime_shim.engine_config import containerd
    monkeypatch.setattr(containerd, "installed_version", lambda: (1, 6))
    assert any("ignores enable_cdi" in note for note in run(cfg, enable_cdi=True).notes)
    monkeypatch.setattr(containerd, "installed_version", lambda: (1, 7))
    assert not any("ignores enable_cdi" in note for note in run(cfg, enable_cdi=True).notes)


def test_installed_version_reads_containerd(monkeypatch, tmp_path):
    from runtime_shim.engine_config import containerd
    fake = tmp_path / "containerd"
    fake.write_text("#!/bin/sh\necho 'containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert containerd.installed_version() == (1, 6)
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert containerd.installed_version() is None
