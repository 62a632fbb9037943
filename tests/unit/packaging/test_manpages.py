"""The manual pages and completion files the packages install (packaging/pkgtools/manpages.py), made
here from the checkout's own installed programs (the venv's bin/, as the build makes them from the
environment's): every page is well-formed roff (man --warnings says nothing), holds every line its
program's --help prints, and nvidia-ctk's bash completion completes through the real launcher."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.support.pkgtools import load_pkgtools

load_pkgtools()
from pkgtools import manpages  # noqa: E402

BINDIR = os.path.dirname(sys.executable)
PROGRAMS = ["nvidia-cdi-hook", "nvidia-container-cli", "nvidia-container-runtime", "nvidia-container-runtime-hook",
            "nvidia-ctk", "nvidia-device-plugin"]


@pytest.fixture(scope="module")
def collected():
    missing = [p for p in PROGRAMS if not os.path.exists(os.path.join(BINDIR, p))]
    if missing:
        pytest.skip(f"the venv has no {', '.join(missing)} (make venv)")
    return manpages.collect(BINDIR, PROGRAMS)


def rendered(page: str, tmp_path, warnings: bool = False) -> subprocess.CompletedProcess:
    """man's text of the page; with warnings, groff's complaints about it on stderr (lintian's
    groff-message check runs man the same way)."""
    source = tmp_path / "page.1"
    source.write_text(page)
    env = {**os.environ, "LC_ALL": "C.UTF-8", "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat"}
    argv = ["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"] if warnings else ["man", "-E", "UTF-8", "-l"]
    return subprocess.run([*argv, str(source)], capture_output=True, text=True, env=env, timeout=60)


def words(text: str) -> str:
    return " ".join(text.split())


def test_every_program_has_a_page_made_from_its_help(collected, tmp_path):
    if not shutil.which("man"):
        pytest.skip("man is not installed")
    helps = collected["help"]
    # nvidia-ctk: every command of click's tree; the argparse programs: their subcommands
    assert {"nvidia-ctk", "nvidia-ctk cdi generate", "nvidia-ctk runtime configure",
            "nvidia-ctk system create-dev-char-symlinks"} <= {c for c, _ in helps["nvidia-ctk"]}
    assert [c for c, _ in helps["nvidia-container-cli"]] == [
        "nvidia-container-cli", "nvidia-container-cli info", "nvidia-container-cli list",
        "nvidia-container-cli configure"]
    assert "nvidia-container-runtime" not in helps   # its --help is runc's
    for program in manpages.SUMMARIES:
        page = manpages.man_page(program, helps.get(program, []), "0.1.0", 1764460800, "gpu-container-toolkit")
        checked = rendered(page, tmp_path, warnings=True)
        assert checked.returncode == 0 and checked.stderr == "", f"{program}: {checked.stderr}"
        text = rendered(page, tmp_path).stdout
        # man may hyphenate nothing (.nh) and fill only the NAME and DESCRIPTION paragraphs
        assert words(f"{program} - {manpages.SUMMARIES[program]}") in words(text), program
        assert "2025-11-30" in text and "gpu-container-toolkit 0.1.0" in text
        for command, help_text in helps.get(program, []):
            for line in help_text.splitlines():
                if line.strip():
                    assert line.rstrip() in text, f"{command}: {line!r} not in the page"
    assert "runc(8)" in rendered(manpages.man_page("nvidia-container-runtime", [], "0.1.0", 0, "gct"),
                                 tmp_path).stdout


def test_no_help_text_names_a_file_of_the_checkout(collected):
    """--help (and so the manual pages) names no document or module of the source tree, which an
    installed package does not have (issue 27, item 8)."""
    for program, helps in collected["help"].items():
        for command, text in helps:
            assert not re.search(r"\bdocs/|\b\w+/\w+\.py\b", text), f"{command}: {text}"


def test_roff_control_characters_in_help_text_are_escaped(tmp_path):
    if not shutil.which("man"):
        pytest.skip("man is not installed")
    help_text = ".TH looks like a request\n'also one\nback\\slash and --option\n\n  indented"
    page = manpages.man_page("nvidia-ctk", [["nvidia-ctk", help_text]], "0.1.0", 0, "gct")
    assert "\n.TH looks" not in page and "\n'also" not in page
    text = rendered(page, tmp_path).stdout
    for line in help_text.splitlines():
        assert line in text, line


def test_click_commands_reads_the_commands_section():
    text = "Usage: x [OPTIONS] COMMAND\n\nOptions:\n  -h  help\n\nCommands:\n  cdi   CDI specs\n  config  Print\n"
    assert manpages.click_commands(text) == ["cdi", "config"]
    assert manpages.click_commands("Usage: x [OPTIONS]\n\nOptions:\n  -h  help\n") == []


def test_the_bash_completion_file_completes_nvidia_ctk(collected, tmp_path):
    """The script the packages install as /usr/share/bash-completion/completions/nvidia-ctk, loaded
    into bash, completes through the real program: `nvidia-ctk c<TAB>`, `nvidia-ctk cdi g<TAB>`."""
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    scripts = collected["completion"]["nvidia-ctk"]
    assert set(scripts) == {"bash", "zsh", "fish"}
    assert "#compdef nvidia-ctk" in scripts["zsh"] and "complete --no-files --command nvidia-ctk" in scripts["fish"]
    script = tmp_path / "nvidia-ctk"
    script.write_text(scripts["bash"])
    probe = ('source "$1"; complete -p nvidia-ctk; '
             'for line in "nvidia-ctk c" "nvidia-ctk cdi g"; do '
             'COMP_WORDS=($line); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); '
             '_nvidia_ctk_completion nvidia-ctk; echo "$line: ${COMPREPLY[*]}"; done')
    done = subprocess.run(["bash", "-c", probe, "bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{BINDIR}:/usr/bin:/bin", "LANG": "C.UTF-8"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.match(r"complete .*-F _nvidia_ctk_completion nvidia-ctk$", lines[0]), lines
    assert lines[1:] == ["nvidia-ctk c: cdi config", "nvidia-ctk cdi g: generate"], lines
