"""Every program's message lines stay one printable line whatever outside value they name: a newline,
ESC/CSI or a bidi override in a state's bundle, a config.toml value or a file name is escaped as
repr() escapes it (cdi.errors.message_line; message.c for nvidia-cdi-hook), never printed as it is.
The programs are run as installed (the launchers of `make venv`)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from cdi.errors import MAX_DIGITS, MAX_TEXT, MAX_WORD, bounded, message_line, printable, shown, what_where

BIN = Path(sys.executable).parent
# a second "error line", a terminal escape (ESC [ and the one-byte CSI), a bidi override, a line separator
FORGED = "\nnvidia-ctk: error: forged\x1b[2J\x9b31m\u202e\u2028"
needs_launchers = pytest.mark.skipif(not (BIN / "nvidia-cdi-hook").exists(),
                                     reason="needs the installed launchers (make venv)")

# characters the random texts are made of: plain ones, quotes and backslashes (kept as they are),
# and assigned characters that are not printable (escaped). No unassigned code points: nvidia-cdi-hook
# shows those as they are, Python escapes them (message.c says why).
PLAIN = "abc /.-_()'\"\\é☃😀中"
UNPRINTABLE = "\n\r\t\x00\x07\x1b\x7f\x85\x9b\xa0\xad\u061c\u200b\u200e\u202e\u2028\u2029\u2066\ufeff\ue000"


def random_text(rng: random.Random, alphabet: str = PLAIN + UNPRINTABLE) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))


def assert_one_printable_line(stderr: str, prefix: str) -> str:
    lines = stderr.splitlines()     # splits at \n, \r, \x85, \u2028 ... too
    assert len(lines) == 1, stderr
    line, = lines
    assert line.startswith(prefix) and line.isprintable(), stderr
    assert stderr == line + "\n"
    return line


# -- the functions every program's line goes through ------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("plain /path (x) 'q' \\n", "plain /path (x) 'q' \\n"),       # printable: exactly as it is
    ("a\nb", "a\\nb"),
    ("\x1b[2J\x9b", "\\x1b[2J\\x9b"),
    ("\u202eevil\u2028", "\\u202eevil\\u2028"),
    ("bad byte \udcff", "bad byte \\udcff"),                        # os.fsdecode of a byte that is not UTF-8
])
def test_printable(text, expected):
    assert printable(text) == expected


@pytest.mark.parametrize("where, expected", [
    ("/run/x/config.json", "/run/x/config.json"),
    ("/run/a b/it's", "/run/a b/it's"),
    ("/run/a\nb", "'/run/a\\nb'"),
    (b"/run/\xff", "'/run/\\udcff'"),
])
def test_shown_quotes_only_what_is_not_plain(where, expected):
    assert shown(where) == expected
    assert what_where("cannot read", where) == f"cannot read ({expected})"


def test_message_lines_are_one_printable_line_for_any_text():
    rng = random.Random(20261124)
    for _ in range(3000):
        what, where = random_text(rng), random_text(rng)
        line = message_line("prog", "error", what_where(what, where))
        assert line.isprintable() and len(line.splitlines()) == 1, repr(line)
        if what.isprintable() and (not where or where.isprintable()):
            assert line == f"prog: error: {what} ({where})" if where else f"prog: error: {what}"
        if "\\" not in what:     # nothing is lost: the escapes read back to the text
            assert eval("'''" + printable(what).replace("'", "\\'") + " '''")[:-1] == what  # noqa: S307


@pytest.mark.parametrize("text, expected", [
    ("uid " + "1" * 150 + " is bad", "uid " + "1" * 21 + "..." + "1" * 8 + " is bad"),
    ("id 0x" + "7" * 33 + "!", "id 0x" + "7" * 21 + "..." + "7" * 8 + "!"),
    ("n " + "4" * MAX_DIGITS, "n " + "4" * MAX_DIGITS),                       # up to the limit: whole
    ("/x/" + "a" * 300 + "/y", "/x/" + "a" * 186 + "..." + "a" * 62 + "/y"),
    ("/x/" + "é" * 253, "/x/" + "é" * 253),                                   # characters, not bytes
    ("a b " * 1100, ("a b " * 1100)[:3069] + "..." + ("a b " * 1100)[-1024:]),
])
def test_values_in_a_message_are_bounded(text, expected):
    assert bounded(text) == expected == printable(text)
    assert message_line("p", "error", text) == f"p: error: {expected}"


def test_bounded_lines_keep_every_word_and_number_short():
    rng = random.Random(22)
    pieces = ["1" * 40, "9" * 300, "x" * 300, "é" * 260, "😀" * 30 + "5" * 50, " ", "  ", "a", "12", "\n"]
    for _ in range(500):
        line = bounded("".join(rng.choice(pieces) for _ in range(rng.randrange(1, 40))))
        assert len(line) <= MAX_TEXT
        assert all(len(word) <= MAX_WORD for word in line.split(" ")[1:-1])
        digits = "".join(c if c.isdigit() else " " for c in line).split()
        assert all(len(number) <= MAX_DIGITS for number in digits[1:-1])


# -- each program, as installed -------------------------------------------------------------------

def run(program: str, *args: str, stdin: str = "", env: dict | None = None, cwd=None):
    return subprocess.run([str(BIN / program), *args], input=stdin, capture_output=True, text=True,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **(env or {})}, cwd=cwd or "/",
                          timeout=60)


@needs_launchers
@pytest.mark.parametrize("program", ["nvidia-container-runtime-hook", "nvidia-cdi-hook"])
def test_the_hooks_quote_a_forged_bundle(program):
    args = ["prestart"] if program == "nvidia-container-runtime-hook" else ["update-ldcache", "--folder", "/lib"]
    bundle = "/nonexistent" + FORGED
    result = run(program, *args, stdin=json.dumps({"bundle": bundle, "pid": 1}))
    assert result.returncode == 1
    line = assert_one_printable_line(result.stderr, f"{program}: error: ")
    assert repr(bundle + "/config.json") in line


@needs_launchers
def test_nvidia_cdi_hook_writes_its_line_as_the_python_programs_do():
    """message.c's escaping is cdi.errors' to the character, on random bundle paths."""
    rng = random.Random(11)
    for _ in range(60):
        bundle = "/nonexistent/" + random_text(rng).replace("\x00", "")
        result = run("nvidia-cdi-hook", "update-ldcache", "--folder", "/lib",
                     stdin=json.dumps({"bundle": bundle, "pid": 1}))
        expected = message_line("nvidia-cdi-hook", "error", what_where(
            "cannot read the container's config: No such file or directory",
            os.path.join(bundle, "config.json")))
        assert result.stderr == expected + "\n"


@needs_launchers
def test_nvidia_cdi_hook_bounds_its_line_as_the_python_programs_do():
    """message.c's hook_bound is cdi.errors.bounded to the character: long numbers, long words (of
    multibyte characters too), a line over MAX_TEXT, mixed with what gets escaped."""
    rng = random.Random(2210)
    # path components of at most 255 bytes (else the error is ENAMETOOLONG), words of many of them
    pieces = ["7" * 33, "1" * 150, "é" * 120, "😀" * 60, "x" * 200, "a b ", "\n", "\x1b", "中", "42"]
    bundles = ["/nonexistent/" + "/".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30)))
               for _ in range(40)]
    # a line over MAX_TEXT: escapes make 4 characters of each ESC byte
    bundles += ["/nonexistent/" + "/".join(["\x1b " * 120] * 8), "/nonexistent/" + "1" * 150]
    for bundle in bundles:
        result = run("nvidia-cdi-hook", "update-ldcache", "--folder", "/lib",
                     stdin=json.dumps({"bundle": bundle, "pid": 1}))
        expected = message_line("nvidia-cdi-hook", "error", what_where(
            "cannot read the container's config: No such file or directory",
            os.path.join(bundle, "config.json")))
        assert result.stderr == expected + "\n"


@needs_launchers
def test_the_runtime_shim_quotes_a_forged_bundle(tmp_path):
    bundle = tmp_path / ("b" + FORGED)
    bundle.mkdir()
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-runtime]\nruntimes = ["/bin/true"]\n')
    result = run("nvidia-container-runtime", "create", "--bundle", str(bundle), "ctr", cwd=tmp_path,
                 env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "c")})
    assert result.returncode == 1
    line = assert_one_printable_line(result.stderr, "nvidia-container-runtime: error: cannot read the OCI spec")
    assert repr(str(bundle / "config.json")) in line


@needs_launchers
def test_a_forged_driver_root_in_config_toml(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f"[nvidia-container-cli]\nroot = {json.dumps('/missing' + FORGED)}\n")
    env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
    result = run("nvidia-container-cli", "info", env=env)
    assert result.returncode == 1
    assert_one_printable_line(result.stderr, "nvidia-container-cli: error: ")
    result = subprocess.run([str(BIN / "nvidia-ctk"), "info"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **env})
    assert result.returncode == 1
    assert_one_printable_line(result.stderr, "nvidia-ctk: error: ")


@needs_launchers
def test_a_warning_about_a_forged_config_key_is_one_line(tmp_path):
    """An unknown key is a warning (through logging): the key is the file's, shown escaped."""
    config = tmp_path / "config.toml"
    config.write_text(f"{json.dumps('x' + FORGED)} = 1\n")
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, "process": {"env": []}}))
    result = run("nvidia-container-runtime-hook", "-config", str(config), "prestart",
                 stdin=json.dumps({"bundle": str(bundle), "pid": 1}))
    assert result.returncode == 0, result.stderr
    assert_one_printable_line(result.stderr, "unknown config key x\\n")


def test_nvidia_ctk_cdi_commands_escape_spec_file_names(tmp_path):
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    bad = spec_dir / ("bad" + FORGED + ".json")
    bad.write_text("{}")
    ctk = [sys.executable, "-m", "ctk.main"]
    result = subprocess.run([*ctk, "cdi", "validate", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    for line in result.stderr.splitlines(keepends=True):
        assert line.endswith("\n") and line[:-1].isprintable() and line.startswith("nvidia-ctk: error: $"), line
        assert repr(str(bad)) in line
    result = subprocess.run([*ctk, "cdi", "list", "--spec-dir", str(spec_dir)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stderr
    for line in result.stderr.splitlines(keepends=True):
        assert line.endswith("\n") and line[:-1].isprintable(), line
        assert line.startswith("nvidia-ctk: warning: skipping invalid spec: $"), line


@needs_launchers
def test_the_launcher_quotes_its_own_file_name(tmp_path):
    """The launcher picks its program by its own file name; a copy under a name it does not know says
    so in one line, whatever the name holds."""
    import shutil

    copy = tmp_path / ("x" + FORGED.replace("/", "_"))
    shutil.copy(BIN / "gct-launcher-probe", copy)
    result = subprocess.run([str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 127
    line = assert_one_printable_line(result.stderr, "x\\nnvidia-ctk: error: forged\\x1b[2J")
    assert "this launcher does not know a program of that name" in line
