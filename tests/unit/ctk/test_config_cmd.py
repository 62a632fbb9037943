"""`nvidia-ctk config [--config-file F] [--set KEY[=VALUE]]... [--in-place | --output F]` (issue 14,
item 9): NVIDIA's command, keeping the file's comments; NVIDIA's rootless docker step is
`nvidia-ctk config --set nvidia-container-cli.no-cgroups --in-place`."""
from __future__ import annotations

import os

import pytest

from cdi.config import load_config
from ctk.main import main

ORIGINAL = """# the admin's comment
disable-require = false

[nvidia-container-cli]
#no-cgroups = false
ldconfig = "@/sbin/ldconfig"   # trailing comment
"""


def ctk_config(*args):
    return main(["config", *args])


def test_rootless_step_in_place_keeps_comments_mode_and_the_rest(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text(ORIGINAL)
    path.chmod(0o640)
    assert ctk_config("--config-file", str(path), "--set", "nvidia-container-cli.no-cgroups", "--in-place") == 0
    assert capsys.readouterr() == ("", "")
    text = path.read_text()
    assert text.startswith(ORIGINAL.rstrip("\n")) and text.endswith("no-cgroups = true\n")
    assert (path.stat().st_mode & 0o777) == 0o640
    assert load_config(path).nvidia_container_cli.no_cgroups is True
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]   # no temp file left


def test_values_by_type_and_new_tables_printed_to_stdout(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text(ORIGINAL)
    assert ctk_config("-c", str(path), "--set", "disable-require=true", "--set", "nvidia-container-runtime.mode=cdi",
                      "--set", "nvidia-container-runtime.modes.cdi.spec-dirs=/a;/b", "--set-list-separator", ";",
                      "--set", "features.allow-ldconfig-from-container=0") == 0
    out = capsys.readouterr().out
    assert path.read_text() == ORIGINAL   # only printed
    assert "# the admin's comment\ndisable-require = true\n" in out
    assert '[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/a", "/b"]' in out
    assert "[nvidia-container-runtime.modes]" not in out   # no empty header for the table in between
    printed = tmp_path / "printed.toml"
    printed.write_text(out)
    config = load_config(printed)
    assert (config.disable_require, config.nvidia_container_runtime.mode, config.cdi.spec_dirs, config.features) \
        == (True, "cdi", ("/a", "/b"), frozenset())


def test_a_missing_file_is_an_empty_one_written_with_its_folders(tmp_path, monkeypatch, capsys):
    path = tmp_path / "xdg" / "nvidia-container-runtime" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("NVIDIA_CTK_CONFIG_FILE_PATH", raising=False)
    old_umask = os.umask(0o077)
    try:
        assert ctk_config("--set", "nvidia-container-cli.no-cgroups=true", "-i") == 0
    finally:
        os.umask(old_umask)
    assert path.read_text() == "[nvidia-container-cli]\nno-cgroups = true\n"
    assert [(p.stat().st_mode & 0o777) for p in (path.parent.parent, path.parent, path)] == [0o755, 0o755, 0o644]
    out = tmp_path / "copy.toml"
    assert ctk_config("-c", str(path), "--output", str(out)) == 0
    assert out.read_text() == path.read_text()


@pytest.mark.parametrize("args, message", [
    (["--set", "nvidia-container-cli.no-such-key=1"], "unknown config key 'nvidia-container-cli.no-such-key' (--set)"),
    (["--set", "nvidia-container-cli=1"], "unknown config key 'nvidia-container-cli' (--set)"),
    (["--set", "features.no-such-feature"], "unknown config key 'features.no-such-feature' (--set)"),
    (["--set", "disable-require=maybe"], "disable-require must be a boolean (true or false), not 'maybe' (--set)"),
    (["--set", "nvidia-container-cli.root"], "expected nvidia-container-cli.root=VALUE (--set)"),
    # issue 27.6: csv was accepted, then every GPU container failed; the list offers only what runs
    (["--set", "nvidia-container-runtime.mode=bogus"], "nvidia-container-runtime.mode must be one of auto, legacy, "
                                                       "cdi, jit-cdi, not 'bogus' (--set)"),
    (["--set", "nvidia-container-runtime.mode=csv"], "nvidia-container-runtime.mode must be one of auto, legacy, "
                                                     "cdi, jit-cdi, not 'csv' (--set)"),
    (["--set", "nvidia-container-runtime.log-level=verbose"], "nvidia-container-runtime.log-level must be one of "
     "trace, debug, info, warn, warning, error, fatal, panic, not 'verbose' (--set)"),
    (["--set", "nvidia-container-runtime.modes.legacy.cuda-compat-mode=copy"],
     "nvidia-container-runtime.modes.legacy.cuda-compat-mode must be one of ldconfig, mount, disabled, hook, "
     "not 'copy' (--set)"),
    (["--in-place", "--output", "x"], "--in-place and --output cannot be used together (--output)"),
])
def test_bad_settings_are_one_line_and_change_nothing(tmp_path, capsys, args, message):
    path = tmp_path / "config.toml"
    path.write_text(ORIGINAL)
    in_place = [] if "--in-place" in args else ["--in-place"]
    assert ctk_config("-c", str(path), *in_place, *args) == 1
    out, err = capsys.readouterr()
    assert err == f"nvidia-ctk: error: {message.format(path=path)}\n" and out == ""
    assert path.read_text() == ORIGINAL


def test_a_file_that_is_not_toml(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text("[nvidia-container-cli\n")
    assert ctk_config("-c", str(path)) == 1
    err = capsys.readouterr().err
    assert err.startswith("nvidia-ctk: error: invalid TOML: ") and err.endswith(f"({path})\n") and err.count("\n") == 1


def test_a_config_file_holding_csv_still_loads_and_its_typo_error_offers_no_csv(tmp_path):
    """A config with NVIDIA's csv mode is read (the runtime refuses it per container); a typo's message
    lists only the modes that run."""
    from cdi.errors import ConfigError

    path = tmp_path / "config.toml"
    path.write_text('[nvidia-container-runtime]\nmode = "csv"\n')
    assert load_config(str(path)).nvidia_container_runtime.mode == "csv"
    path.write_text('[nvidia-container-runtime]\nmode = "cvs"\n')
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert info.value.what == "nvidia-container-runtime.mode must be one of auto, legacy, cdi, jit-cdi, not 'cvs'"


def test_config_default_prints_every_key_with_its_default(tmp_path, capsys):
    """Issue 27.2: NVIDIA's `nvidia-ctk config default`. Read back, it is the built-in configuration."""
    from cdi.config import Config
    from cdi.record import replace

    assert main(["config", "default"]) == 0
    text = capsys.readouterr().out
    assert '[nvidia-container-runtime]\ndebug = "/dev/null"\nlog-level = "info"\n' in text
    path = tmp_path / "config.toml"
    assert main(["config", "default", "--output", str(path)]) == 0
    assert path.read_text() == text
    assert replace(load_config(str(path)), source=None) == Config()
    assert main(["config", "--set", "nvidia-container-runtime.mode=cdi", "-c", str(path)]) == 0   # still a command
    assert 'mode = "cdi"' in capsys.readouterr().out
