"""nvidia-cdi-hook's JSON reader (c_common/json.c, the launcher's too) and the two values it takes from
hostile documents: the state's bundle and config.json's root.path.

A test-only entry point (json_probe.c, compiled here with the hook's own sources, under AddressSanitizer
and UBSan when the compiler has them) runs the program's functions on each document. The edge cases
pin RFC 8259 and the last-key-wins rule; the fuzz test mutates real-looking documents (bytes flipped,
JSON tokens inserted, slices cut, repeated, truncated) and compares every outcome with Python's
json.loads read the way the Python hooks read it, held to RFC 8259 (strict UTF-8 without a BOM, no
NaN/Infinity)."""
from __future__ import annotations

import io
import json
import os
import posixpath
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from hook.cdi_hook import HookError, read_state, state_bundle

REPO = Path(__file__).resolve().parents[3]
HOOK_SOURCES = REPO / "cdi_hook"
JSON_SOURCES = REPO / "c_common"   # the C the hook shares with the launcher: its JSON reader, message text
HELPER_SOURCES = REPO / "libcontainer_c" / "src"   # the bounded reader container.c uses
PROBE_SOURCE = Path(__file__).with_name("json_probe.c")
FUZZ_DOCS = int(os.environ.get("GCT_JSON_FUZZ_DOCS", "3000"))   # per kind


class Probe:
    def __init__(self, exe: Path, sanitized: bool):
        self.exe, self.sanitized = exe, sanitized

    def run(self, records: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        """[(kind, payload)] -> [("ok" | "error", bytes)]"""
        data = b"".join(kind.encode() + struct.pack("<I", len(payload)) + payload for kind, payload in records)
        env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99", "UBSAN_OPTIONS": "halt_on_error=1"}
        done = subprocess.run([str(self.exe)], input=data, capture_output=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
        lines = done.stdout.decode().splitlines()
        assert len(lines) == len(records)
        return [(line.split(" ")[0], bytes.fromhex(line.split(" ")[1])) for line in lines]

    def one(self, kind: str, doc: bytes):
        return self.run([(kind, doc)])[0]


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Probe:
    out = tmp_path_factory.mktemp("json-probe") / "json_probe"
    sources = [str(JSON_SOURCES / f) for f in ("json.c", "json_value.c", "message_text.c")]
    sources += [str(HOOK_SOURCES / f) for f in ("args.c", "container.c", "message.c")]
    sources.append(str(HELPER_SOURCES / "read_bounded.c"))
    cmd = ["gcc", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", f"-I{HOOK_SOURCES}",
           f"-I{JSON_SOURCES}", f"-I{HELPER_SOURCES}",
           str(PROBE_SOURCE), *sources, "-o", str(out)]
    sanitizers = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    if subprocess.run(cmd + sanitizers, capture_output=True).returncode == 0:
        return Probe(out, True)
    subprocess.run(cmd, check=True)
    return Probe(out, False)


def test_the_probe_runs_under_the_sanitizers_where_the_compiler_has_them(probe):
    if not probe.sanitized:
        pytest.skip("gcc without AddressSanitizer/UBSan here")
    assert probe.one("s", b'{"bundle": "/b"}') == ("ok", b"/b")


# -- the state's bundle ----------------------------------------------------------------------------

DEEP = 10000  # JSON_MAX_DEPTH, Go's encoding/json limit


@pytest.mark.parametrize("doc, value", [
    (b'{"bundle": "/b"}', "/b"),
    (b' \t\n\r{"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": "/b", "annotations": {}} \n', "/b"),
    (b'{"bundle": "/a", "bundle": "/b"}', "/b"),                       # the last key wins
    (b'{"bundlePath": "/p"}', "/p"),                                   # older runtimes
    (b'{"bundle": "/b", "bundlePath": "/p"}', "/b"),
    (b'{"bundle": "", "bundlePath": "/p"}', "/p"),                     # `bundle or bundlePath`
    (b'{"bundle": null, "bundlePath": "/p"}', "/p"),
    (b'{"bundle": false, "bundlePath": "/p"}', "/p"),
    (b'{"bundle": 0, "bundlePath": "/p"}', "/p"),
    (b'{"bundle": -0.0e7, "bundlePath": "/p"}', "/p"),
    (b'{"bundle": 1e-400, "bundlePath": "/p"}', "/p"),                 # 0.0 as a float
    (b'{"bundle": [], "bundlePath": "/p"}', "/p"),
    (b'{"bundle": { }, "bundlePath": "/p"}', "/p"),
    (b'{"bundle": "/a", "x": {"bundle": "/nested"}}', "/a"),
    (b'{"x": {"bundle": "/nested"}, "bundle": "/a"}', "/a"),
    (b'{"bund\\u006ce": "/b"}', "/b"),                                 # keys compare decoded
    (b'{"bundle\\u0000": "/x", "bundle": "/b"}', "/b"),
    (b'{"' + b"k" * 200 + b'": 1, "bundle": "/b"}', "/b"),
    (b'{"bundle": "/caf\\u00e9/\\ud83d\\ude00/\\"q\\"\\/\\\\\\t"}', '/caf\u00e9/\U0001f600/"q"/\\\t'),
    ('{"bundle": "/caf\u00e9\u2603\U0001f600"}'.encode(), "/caf\u00e9\u2603\U0001f600"),
    (b'{"other": "\\ud800 \\u0000", "bundle": "/b"}', "/b"),           # only the strings we use are held to more
    (b'{"bundle": "/b\x7f"}', "/b\x7f"),
    (b'{"bundle": "/b", "n": [-0.5e+10, 0, 1E3, 12.25, -7, true, false, null, ""]}', "/b"),
    (b'{"bundle": "/b", "deep": ' + b"[" * (DEEP - 1) + b"]" * (DEEP - 1) + b"}", "/b"),
])
def test_state_values(probe, doc, value):
    assert probe.one("s", doc) == ("ok", value.encode())


@pytest.mark.parametrize("doc, message", [
    (b"", "Expecting value: line 1 column 1 (byte 0)"),
    (b"  ", "Expecting value"),
    (b"[]", "not a JSON object"),
    (b'"{}"', "not a JSON object"),
    (b"{}", "no absolute bundle path"),
    (b'{"bundle": "relative"}', "no absolute bundle path"),
    (b'{"bundle": 1e-300, "bundlePath": "/p"}', "no absolute bundle path"),   # a true non-string
    (b'{"bundle": [0], "bundlePath": "/p"}', "no absolute bundle path"),
    (b'{"bundle": true, "bundlePath": "/p"}', "no absolute bundle path"),
    (b'{"bundle": {"a": 1}, "bundlePath": "/p"}', "no absolute bundle path"),
    (b'{"bundle": "/b", "bundle": "rel"}', "no absolute bundle path"),
    (b'{"bundle": "/a\\u0000b"}', "the bundle path holds a NUL character"),
    (b'{"bundle": "/\\ud83d"}', "the bundle path holds a lone surrogate"),
    (b'{"bundle": "/\\ude00\\ud83d"}', "the bundle path holds a lone surrogate"),
    (b'{"bundle": "/b"} x', "Extra data: line 1 column 18 (byte 17)"),
    (b'{"bundle": "/b"}{}', "Extra data"),
    (b'{"bundle": "/b"}\x00', "Extra data"),
    (b'{"bundle": "/b",}', "Expecting property name enclosed in double quotes"),
    (b'{"bundle" "/b"}', "Expecting ':' delimiter"),
    (b'{"bundle": "/b" "x": 1}', "Expecting ',' delimiter"),
    (b'{"bundle": "/b", "a": [1,]}', "Expecting value"),
    (b'{"bundle": "/b"', "Expecting ',' delimiter"),
    (b'{"bundle": "/b', "Unterminated string starting at: line 1 column 12"),
    (b'{"bundle": "/b\\', "Unterminated string"),
    (b'\xef\xbb\xbf{"bundle": "/b"}', "Expecting value"),              # no BOM (RFC 8259, Go)
    ('{"bundle": "/b"}'.encode("utf-16"), "Expecting value"),
    (b'{"bundle": "/b", "n": NaN}', "Expecting value"),
    (b'{"bundle": "/b", "n": -Infinity}', "Expecting value"),
    (b'{"bundle": "/b", "n": 01}', "Expecting ',' delimiter"),
    (b'{"bundle": "/b", "n": 1.}', "Expecting ',' delimiter"),
    (b'{"bundle": "/b", "n": .5}', "Expecting value"),
    (b'{"bundle": "/b", "n": 1e}', "Expecting ',' delimiter"),
    (b'{"bundle": "/b", "n": +1}', "Expecting value"),
    (b'{"bundle": "/b", "n": -}', "Expecting value"),
    (b'{"bundle": "/b", "n": tru}', "Expecting value"),
    (b'{"bundle": "/b", "n": nulll}', "Expecting ',' delimiter"),
    (b'\x0c{"bundle": "/b"}', "Expecting value"),                      # form feed is no JSON whitespace
    (b'{"bundle": "/b\xff"}', "Invalid UTF-8"),
    (b'{"bundle": "/b\xc0\xaf"}', "Invalid UTF-8"),                    # overlong '/'
    (b'{"bundle": "/b\xed\xa0\x80"}', "Invalid UTF-8"),                # an encoded surrogate
    (b'{"bundle": "/b\xf4\x90\x80\x80"}', "Invalid UTF-8"),            # beyond U+10FFFF
    (b'{"bundle": "/b\xe2\x82"}', "Invalid UTF-8"),                    # truncated sequence
    (b'{"x\xff": 1, "bundle": "/b"}', "Invalid UTF-8"),
    (b'{"bundle": "/b\x01"}', "Invalid control character at"),
    (b'{"bundle": "/b\n"}', "Invalid control character at"),
    (b'{"bundle": "/b\\x"}', "Invalid \\escape"),
    (b'{"bundle": "/b\\u12"}', "Invalid \\uXXXX escape"),
    (b'{"bundle": "/b\\u12G4"}', "Invalid \\uXXXX escape"),
    (b'{"bundle": "/b", "deep": ' + b"[" * DEEP + b"]" * DEEP + b"}", "Nesting too deep"),
    (b"[" * 200_000, "Nesting too deep"),
    (b'{"a": 1}\n\n  ]', "Extra data: line 3 column 3 (byte 12)"),
])
def test_state_errors(probe, doc, message):
    outcome, text = probe.one("s", doc)
    assert outcome == "error" and message in text.decode()
    assert b"\n" not in text


# -- config.json's root.path -----------------------------------------------------------------------

@pytest.mark.parametrize("doc, value", [
    (b'{"ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": true}}', "rootfs"),
    (b'{"root": {"path": "a", "path": "b"}}', "b"),
    (b'{"root": 5, "root": {"path": "a"}}', "a"),
    (b'{"root": {"path": "a", "nested": {"path": "b"}}}', "a"),
    (b'{"root": {"nested": {"path": "b"}, "path": "a"}}', "a"),
    (b'{"a": [{"root": {"path": "x"}}], "root": {"path": "y"}}', "y"),
    (b'{"root": {"path": "/abs/rootfs/"}}', "/abs/rootfs/"),
    (b'{"r\\u006f\\u006ft": {"p\\u0061th": "x"}}', "x"),
])
def test_config_values(probe, doc, value):
    assert probe.one("c", doc) == ("ok", value.encode())


@pytest.mark.parametrize("doc, message", [
    (b'{"root": {"path": "a"}, "root": {"readonly": true}}', "container config has no root.path"),  # last root
    (b'{"root": {"path": "a"}, "root": 5}', "container config has no root.path"),
    (b'{"x": {"root": {"path": "n"}}}', "container config has no root.path"),
    (b'{"root": {"x": {"path": "n"}}}', "container config has no root.path"),
    (b'{"root": [{"path": "n"}]}', "container config has no root.path"),
    (b'{"root": {"path": ""}}', "container config has no root.path"),
    (b'{"root": {"path": 5}}', "container config has no root.path"),
    (b'[{"root": {"path": "n"}}]', "container config has no root.path"),
    (b'{"root": {"path": "a\\u0000b"}}', "root.path holds a NUL character"),
    (b'{"root": {"path": "rootfs"}} garbage', "invalid container config: Extra data"),
])
def test_config_errors(probe, doc, message):
    outcome, text = probe.one("c", doc)
    assert outcome == "error" and message in text.decode()


# config.json of the wrong shape elsewhere (issue 16.5): the prestart hook's Python reader refuses it
# naming the member (cdi.oci_config); nvidia-cdi-hook reads root.path only, so it takes what it does not
# read and refuses the rest in one line
@pytest.mark.parametrize("doc, outcome, text", [
    (b'{"root": {"path": "r"}, "linux": "x"}', "ok", "r"),
    (b'{"root": {"path": "r"}, "mounts": [{"destination": ["/a"], "source": 5}]}', "ok", "r"),
    (b'{"root": {"path": "r"}, "process": {"env": ["A=\\ud800", 5]}}', "ok", "r"),
    (b'{"root": {"path": "r"}, "annotations": {"\\udc80": 1}}', "ok", "r"),
    (b'{"root": "x"}', "error", "container config has no root.path"),
    (b'{"root": {"path": ["r"]}}', "error", "container config has no root.path"),
    (b'{"root": {"path": "r\\ud800"}}', "error", "root.path holds a lone surrogate"),
    (b'{"root": {"path": "r"}, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "error", "Nesting too deep"),
])
def test_config_of_the_wrong_shape_elsewhere(probe, doc, outcome, text):
    got, value = probe.one("c", doc)
    assert got == outcome and text in value.decode()
    assert b"\n" not in value


def test_nested_members_are_found_at_any_depth_below_the_limit(probe):
    inner = b'"x": ' + b'[{"root": ' * 4000 + b'{"path": "n"}' + b"}]" * 4000
    assert probe.one("c", b'{' + inner + b', "root": {"path": "r"}}') == ("ok", b"r")
    assert probe.one("c", b'{"root": {"path": "r", ' + inner + b"}}") == ("ok", b"r")


# -- the rootfs path: posixpath.normpath(os.path.join(bundle, root.path)) ----------------------------

def test_rootfs_path_is_pythons_normpath_of_the_join(probe):
    rng = random.Random(8259)
    parts = ["a", "bc", ".", "..", "", "/", "//", "///", "x.y", "..."]
    pairs = [("/b", "rootfs"), ("/b/", "rootfs"), ("/b", "/abs"), ("/b", "../../../.."), ("/", "."),
             ("//b", "r"), ("///b", "r"), ("/b", "//r"), ("/b", "r/"), ("/b/c", "../d/./e/..")]
    for _ in range(2000):
        base = "/" + "/".join(rng.choice(parts) for _ in range(rng.randint(0, 5)))
        path = "/".join(rng.choice(parts) for _ in range(rng.randint(1, 6))) or "r"
        pairs.append((base, path))
    out = probe.run([("j", f"{b}\0{p}\0".encode()) for b, p in pairs])
    for (base, path), (outcome, value) in zip(pairs, out):
        assert (outcome, value.decode()) == ("ok", posixpath.normpath(posixpath.join(base, path))), (base, path)


# -- fuzzing against json.loads ----------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError(f"not JSON: {name}")


def python_outcome(kind: str, doc: bytes):
    """("ok", value) or ("error", None), as the Python hooks read the document, held to RFC 8259."""
    try:
        value = json.loads(doc.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError):   # UnicodeDecodeError and a BOM included
        return "error", None
    if kind == "s":
        found = (value.get("bundle") or value.get("bundlePath")) if isinstance(value, dict) else None
        if not isinstance(found, str) or not found.startswith("/"):
            return "error", None
    else:
        root = value.get("root") if isinstance(value, dict) else None
        found = root.get("path") if isinstance(root, dict) else None
        if not isinstance(found, str) or not found:
            return "error", None
    try:
        return ("error", None) if "\0" in found else ("ok", found.encode("utf-8"))
    except UnicodeEncodeError:   # a lone surrogate
        return "error", None


def python_process(doc: bytes) -> tuple[str, bytes]:
    """The pid and whether the init waits, as the C reader gives them ("<pid> <0|1>"): a pid is a plain
    int below 10**9 (else 0), waiting is status "creating" or "created"; a document that is not a JSON
    object gives "0 0"."""
    try:
        value = json.loads(doc.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        return "ok", b"0 0"
    pid, status = value.get("pid"), value.get("status")
    pid = pid if type(pid) is int and 0 <= pid < 10**9 else 0
    return "ok", f"{pid} {int(status in ('creating', 'created'))}".encode()


KEYS = {"s": ["bundle", "bundlePath", "bund\\u006ce", "id", "pid"], "c": ["root", "path", "r\\u006fot", "linux", "x"],
        "p": ["pid", "status", "p\\u0069d", "bundle", "state"]}
STRINGS = ['"/run/b"', '"/r\\u00e9\\ud83d\\ude00"', '"rel"', '""', '"/a\\u0000"', '"/\\ud800"', '"rootfs"',
           '"../r\\/s"', '"\\"q\\""', '"/caf\u00e9"']
SCALARS = ["0", "-0.0", "1e-400", "1e400", "12.5e-3", "-7", "true", "false", "null", "[]", "{}", "[0]",
           "1", "4242", "999999999", "1000000000", "42.0", "4e2", '"creating"', '"created"', '"cre\\u0061ted"',
           '"running"', '"creating\\u0000"']
TOKENS = [b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"\\u", b"\\ud83d", b"\\ude00", b"\\u0000", b"0", b"-",
          b"1e-400", b".", b"e", b"true", b"null", b"NaN", b" ", b"\n", b"\x00", b"\x01", b"\x7f", b"\xff",
          b"\xc3\xa9", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b'"bundle"', b'"root"', b'"path"', b'"/y"', b"{}"]


def random_value(rng: random.Random, kind: str, depth: int) -> str:
    """A JSON text (duplicate keys and all) biased towards the members the hook reads."""
    roll = rng.random()
    if depth < 4 and roll < 0.35:
        members = [f'"{rng.choice(KEYS[kind])}": {random_value(rng, kind, depth + 1)}' for _ in range(rng.randint(0, 4))]
        return "{" + ", ".join(members) + "}"
    if depth < 4 and roll < 0.45:
        return "[" + ", ".join(random_value(rng, kind, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    return rng.choice(STRINGS) if roll < 0.8 else rng.choice(SCALARS)


def mutate(rng: random.Random, doc: bytes) -> bytes:
    """Up to two byte-level changes: a token put in or over, a slice cut or repeated, a bit flipped,
    the end cut off."""
    for _ in range(rng.randint(0, 2)):
        i, j = sorted(rng.randrange(len(doc) + 1) for _ in range(2))
        op = rng.randrange(6)
        if op == 0:
            doc = doc[:i] + rng.choice(TOKENS) + doc[i:]
        elif op == 1:
            doc = doc[:i] + rng.choice(TOKENS) + doc[i + 1:]
        elif op == 2:
            doc = doc[:i] + doc[j:]
        elif op == 3:
            doc = doc[:j] + doc[i:j] + doc[j:]
        elif op == 4 and i < len(doc):
            doc = doc[:i] + bytes([doc[i] ^ (1 << rng.randrange(8))]) + doc[i + 1:]
        elif op == 5:
            doc = doc[:j]
    return doc


@pytest.fixture
def restore_int_digits():
    """sys.set_int_max_str_digits is process-wide: other tests count on Python's default limit."""
    limit = sys.get_int_max_str_digits()
    yield
    sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize("kind", ["s", "c"])
def test_fuzzed_documents_read_as_json_loads_reads_them(probe, kind, restore_int_digits):
    sys.set_int_max_str_digits(0)   # Python's own limit on int digits is not JSON's
    rng = random.Random(f"nvidia-cdi-hook {kind}")
    docs = []
    good = {"s": ['"bundle": "/run/b"', '"bundlePath": "/run/p\\u00e9"'],
            "c": ['"root": {"path": "rootfs"}', '"root": {"readonly": true, "path": "r\\/s", "x": {"path": 1}}']}
    while len(docs) < FUZZ_DOCS:
        members = [f'"{rng.choice(KEYS[kind])}": {random_value(rng, kind, 1)}' for _ in range(rng.randint(0, 5))]
        if rng.random() < 0.6:   # a member that gives a value, somewhere (later ones may undo it)
            members.insert(rng.randint(max(0, len(members) - 1), len(members)), rng.choice(good[kind]))
        doc = ("{" + ", ".join(members) + "}").encode()
        docs.append(mutate(rng, doc) if rng.random() < 0.7 else doc)
    docs += [docs[0][:n] for n in range(len(docs[0]))]   # every truncation of one
    results = probe.run([(kind, d) for d in docs])
    accepted = 0
    for doc, (outcome, value) in zip(docs, results):
        expected = python_outcome(kind, doc)
        assert (outcome, value if outcome == "ok" else None) == expected, doc
        accepted += outcome == "ok"
    assert accepted > len(docs) // 10, "a good part of the documents should give a value"


def test_fuzzed_states_give_the_pid_and_status_json_loads_gives(probe, restore_int_digits):
    """hook_parse_state's pid and status (which init a createRuntime hook joins) against json.loads on the same
    generated and mutated states."""
    sys.set_int_max_str_digits(0)
    rng = random.Random("nvidia-cdi-hook pid")
    good = ['"pid": 4242', '"status": "creating"', '"status": "created"', '"pid": 1']
    docs = []
    while len(docs) < FUZZ_DOCS:
        members = [f'"{rng.choice(KEYS["p"])}": {random_value(rng, "p", 1)}' for _ in range(rng.randint(0, 5))]
        members[rng.randint(0, len(members)):0] = rng.sample(good, rng.randint(0, 2))
        doc = ("{" + ", ".join(members) + "}").encode()
        docs.append(mutate(rng, doc) if rng.random() < 0.5 else doc)
    results = probe.run([("p", d) for d in docs])
    for doc, got in zip(docs, results):
        assert got == python_process(doc), doc
    assert sum(got[1].endswith(b" 1") and not got[1].startswith(b"0 ") for got in results) > len(docs) // 20


def test_fuzzed_states_give_the_bundle_the_python_twin_gives(probe, restore_int_digits):
    """The same generated states through the Python twin itself (hook.cdi_hook.read_state and state_bundle,
    docs/c-twins.md): where the C reader gives a bundle, the twin gives the same one; where the twin refuses
    the state, so does the C. The C may refuse more (it holds to RFC 8259: NaN, a lone surrogate or a NUL in
    the bundle), never give another bundle."""
    sys.set_int_max_str_digits(0)
    rng = random.Random("nvidia-cdi-hook twin")
    good = ['"bundle": "/run/b"', '"bundlePath": "/run/p\\u00e9"', '"bundle": NaN', '"bundle": "/\\ud800"']
    docs = []
    while len(docs) < FUZZ_DOCS:
        members = [f'"{rng.choice(KEYS["s"])}": {random_value(rng, "s", 1)}' for _ in range(rng.randint(0, 5))]
        if rng.random() < 0.6:
            members.insert(rng.randint(max(0, len(members) - 1), len(members)), rng.choice(good))
        doc = ("{" + ", ".join(members) + "}").encode()
        docs.append(mutate(rng, doc) if rng.random() < 0.7 else doc)
    results = probe.run([("s", d) for d in docs])
    outcomes = {"same": 0, "c declined": 0, "both refused": 0}
    for doc, (outcome, value) in zip(docs, results):
        try:
            bundle = state_bundle(read_state(io.BytesIO(doc)))
        except HookError:
            bundle = None
        if outcome == "ok":
            assert bundle is not None and value == bundle.encode(), doc
            outcomes["same"] += 1
        else:
            outcomes["c declined" if bundle is not None else "both refused"] += 1
    assert min(outcomes.values()) > 0 and outcomes["same"] > len(docs) // 10, outcomes
