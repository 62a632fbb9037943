"""runtime_shim.runc_argv against the shared table, and the table against the real runc."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from runtime_shim.runc_argv import parse_runc_argv, reorder_command_args, CREATE_FLAGS
from tests.unit.runtime_shim.argv_table import CASES, parametrize_cases
from tests.support.mountns import private_run


@parametrize_cases()
def test_parser_matches_the_table(case):
    parsed = parse_runc_argv(case["argv"])
    assert parsed.command == case["command"]
    assert parsed.prints_version == case.get("version", False)
    assert parsed.modify == case["modify"], parsed.error
    if case["modify"]:
        assert (parsed.bundle or "") == case["bundle"]
        assert parsed.error == ""
    else:
        assert parsed.bundle is None


def test_table_covers_each_outcome():
    outcomes = {(c["command"] in ("create", "run"), c["modify"]) for c in CASES}
    assert outcomes == {(True, True), (True, False), (False, False)}
    assert any(c["command"] is None for c in CASES)


def test_bundle_dir_is_absolute_against_the_callers_cwd():
    parsed = parse_runc_argv(["create", "-b", "sub/dir/", "id"])
    assert parsed.bundle_dir("/work") == "/work/sub/dir"
    assert parse_runc_argv(["create", "id"]).bundle_dir("/work") == "/work"
    assert parse_runc_argv(["create", "-b", "/abs", "id"]).bundle_dir("/work") == "/abs"


def test_log_flags_are_read_from_the_global_level():
    parsed = parse_runc_argv(["--log", "/x/log.json", "--log-format=json", "create", "id"])
    assert (parsed.log_file, parsed.log_format) == ("/x/log.json", "json")
    assert parse_runc_argv(["create", "id"]).log_format == "text"
    # even a refused command line keeps the log flags it had, so the error still reaches the log
    refused = parse_runc_argv(["--log", "l", "create", "--bogus", "id"])
    assert refused.log_file == "l" and not refused.modify


def test_reorder_keeps_arguments_after_a_double_dash_in_place():
    assert reorder_command_args(["id", "-b", "x", "--", "-b", "y"], CREATE_FLAGS) == \
        ["-b", "x", "--", "id", "-b", "y"]


# The real runc decides: a valid create/run fails with a chdir into its (missing) bundle, or with no
# config.json when the bundle is the current directory; a refused one never gets that far. It runs
# with an empty /run of its own: runc makes its default state dir /run/runc before it looks further.
RUNC = shutil.which("runc")


@pytest.mark.skipif(RUNC is None or os.geteuid() != 0, reason="needs runc, as root")
@parametrize_cases([c for c in CASES if c["command"] in ("create", "run")])
def test_table_agrees_with_real_runc(case, tmp_path):
    result = subprocess.run([RUNC, *case["argv"]], cwd=tmp_path, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=30, preexec_fn=private_run)
    assert result.returncode != 0 or "--help" in case["argv"] or "-h" in case["argv"]
    output = result.stderr + "".join(p.read_text(errors="replace") for p in tmp_path.iterdir() if p.is_file())
    if not case["modify"]:
        assert "chdir" not in output and "config.json not found" not in output, output
    elif case["bundle"]:
        assert f"chdir {case['bundle']}: no such file or directory" in output, output
    else:
        assert "JSON specification file config.json not found" in output, output


@pytest.mark.skipif(RUNC is None or os.geteuid() != 0, reason="needs runc, as root")
@parametrize_cases([c for c in CASES if c["command"] is None or any("-v" in a for a in c["argv"])])
def test_table_says_when_real_runc_prints_its_version(case, tmp_path):
    """The shim prints its own version line first exactly when runc prints its version (issue 14.13)."""
    result = subprocess.run([RUNC, *case["argv"]], cwd=tmp_path, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=30, preexec_fn=private_run)
    assert ("runc version" in result.stdout) == case.get("version", False), result.stdout + result.stderr
