"""Plans: diffs, atomic writes that keep the mode, and rollback when one file of a plan fails."""
import os

import pytest

from runtime_shim.engine_config.common import EngineConfigError, FileChange, Plan, apply_plan, write_atomically


def test_write_keeps_mode_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("old\n")
    path.chmod(0o600)
    write_atomically(str(path), "new\n")
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["config.toml"]


def test_failed_plan_restores_the_files_already_written(tmp_path):
    first = tmp_path / "drop-in.toml"
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    plan = Plan("containerd", changes=[
        FileChange(str(first), None, "new drop-in\n"),
        FileChange(str(blocker / "config.toml"), None, "never written\n"),
    ])
    with pytest.raises(EngineConfigError) as err:
        apply_plan(plan)
    assert "cannot write config" in err.value.what
    assert not first.exists()  # rolled back: created files are removed again
    assert sorted(os.listdir(tmp_path)) == ["not-a-dir"]


def test_diff_of_created_and_deleted_files():
    created = FileChange("/etc/x.toml", None, "a = 1")
    assert created.diff() == ("--- /dev/null\n+++ /etc/x.toml\n@@ -0,0 +1 @@\n+a = 1\n"
                              "\\ No newline at end of file\n")
    deleted = FileChange("/etc/x.toml", "a = 1\n", None)
    assert deleted.diff().splitlines()[:2] == ["--- /etc/x.toml", "+++ /dev/null"]
    assert FileChange("/etc/x.toml", "same\n", "same\n").diff() == ""


def test_symlinked_config_is_written_through(tmp_path):
    real = tmp_path / "managed" / "daemon.json"
    real.parent.mkdir()
    real.write_text("{}\n")
    link = tmp_path / "daemon.json"
    link.symlink_to(real)
    write_atomically(str(link), '{"debug": true}\n')
    assert link.is_symlink() and real.read_text() == '{"debug": true}\n'
