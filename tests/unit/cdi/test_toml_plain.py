"""cdi.toml_plain reads what tomllib reads, or gives None: on the packaged config.toml (every line
uncommented too), on hand-picked corners of TOML and on random mutations of those texts."""
from __future__ import annotations

import random
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cdi.config import load_config
from cdi.toml_plain import loads_plain

PACKAGED = (Path(__file__).resolve().parents[3] / "packaging" / "config" / "config.toml").read_text()
UNCOMMENTED = "\n".join(line[1:] if line[:1] == "#" and line[1:2] not in (" ", "") and " = " in line else line
                        for line in PACKAGED.splitlines())


def tomllib_or_error(text: str):
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "invalid"


def test_the_packaged_config_is_plain_both_ways():
    for text in (PACKAGED, UNCOMMENTED):
        assert loads_plain(text) is not None
        assert loads_plain(text) == tomllib.loads(text)
    assert loads_plain(UNCOMMENTED)["nvidia-container-runtime"]["runtimes"] == ["runc", "crun"]


PLAIN = [
    "", "# only a comment\n", "a = 1", "a=1\nb = -2\nc = +3 # n\nd = 0", 'a = "x # not a comment" # one',
    "a = 'lit\\eral \"q\"'", "[t]\na = true\nb = false\n[t.u]\nc = []\n", '[x]\nl = [ "a", \'b\' , "c",]\n',
    "[a.b]\nk = 1\n[a]\nj = 2\n", "\t a = 1 \t\n  [s] # c\n", 'u = "ünïcode ☃"', "a = \"\"\nb = ''",
]
NOT_PLAIN = [
    'a = "esc\\n"', "a.b = 1", '"q" = 1', "a = 1.5", "a = 1979-05-27", "a = { b = 1 }", "[[t]]\na = 1",
    'a = """x"""', "a = '''x'''", "a = [\n 1 ]", "a = [1, 2]", 'a = ["x", [ "y" ]]', "a = 0x10", "a = 1_000",
    "a = 01", "a = inf", "[ t ]", "[t]\n[t]", "a = 1\na = 2", "a = 1\n[a]", "[t]\nb = 1\n[t.b]", "a = 1\r\n",
    "\ufeffa = 1", "a = \"x\x01\"", "# \x7f", "a = true false", "a = trueish", "a", "= 1", "[]", "[t", "a = [",
    'a = "x" "y"', "a = 'x", "a = ", "[t] x", "a = " + "9" * 19, "a = " + "1" * 5000,
]


@pytest.mark.parametrize("text", PLAIN)
def test_plain_texts_read_as_tomllib_reads_them(text):
    assert loads_plain(text) is not None, text
    assert loads_plain(text) == tomllib.loads(text)


@pytest.mark.parametrize("text", NOT_PLAIN)
def test_anything_else_goes_to_tomllib(text):
    assert loads_plain(text) is None, text


def test_random_mutations_are_read_the_same_or_left_to_tomllib():
    rng = random.Random(25)
    pieces = list('[]=#"\'.,\n\t -+0123456789abtrufalse\\{}') + ["true", "false", "[t]", '"s"', "'l'", "\r", "\x00"]
    seeds = [PACKAGED, UNCOMMENTED] + PLAIN + NOT_PLAIN
    accepted = 0
    for _ in range(6000):
        text = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(text))
            if rng.random() < 0.5 and text:
                del text[min(at, len(text) - 1)]
            else:
                text.insert(at, rng.choice(pieces))
        text = "".join(text)
        plain = loads_plain(text)
        if plain is not None:
            accepted += 1
            assert plain == tomllib_or_error(text), repr(text)
    assert accepted > 300   # the test exercises the reader, not only its refusals


def test_a_config_is_read_without_importing_tomllib(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(PACKAGED.replace('#root = ""', 'root = "/drv"'))
    code = (f"import sys; from cdi.config import load_config; c = load_config({str(config)!r}); "
            "print(c.nvidia_container_cli.root, 'tomllib' in sys.modules)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"],
                          capture_output=True, text=True, check=True)
    assert done.stdout == "/drv False\n"
    assert load_config(config, {}).nvidia_container_cli.root == "/drv"
