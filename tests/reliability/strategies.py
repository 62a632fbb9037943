"""Hypothesis strategies for the parsers' inputs: near-valid documents (what real callers send, so the
fuzzer gets past the first check) with arbitrary values put in, then serialised and sometimes damaged
at the byte level (cut short, a byte changed, bytes inserted)."""
from __future__ import annotations

import json
import struct

import yaml
from hypothesis import strategies as st

# strings that mean something to one parser or another, mixed with arbitrary text
SPECIAL_TEXT = ["", " ", "0", "1", "1:0", "1:1", "all", "none", "void", "0,1", " 0 , 1 ", "-1", "4294967296",
                "GPU-00000000-0000-0000-0000-000000000000", "MIG-00000000-0000-0000-0000-000000000001",
                "nvidia.com/gpu=0", "nvidia.com/gpu=all", "nvidia.com/gpu=1:0", "example.com/x=y", "nvidia.com/gpu",
                "compute,utility", "all,compute", "graphics,display", "cuda>=12.0", "brand=tesla,driver>=550",
                "arch=8.0 cuda>=11", "/", "/dev/nvidia0", "../../etc/passwd", "a\nb", "\x00", "\udcff", "é",
                "\u202e", "true", "false", "1e999", "0x10", "010", "x" * 300, "," * 50, "=", "a=b=c"]
texts = st.one_of(st.sampled_from(SPECIAL_TEXT), st.text(max_size=40))
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), texts)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(texts, inner, max_size=4), max_leaves=12)


def mostly(good, bad):
    """good about nine times in ten, else bad: most inputs get past the first check and reach deeper code
    (bad sits in the middle of the range: hypothesis draws the ends of a range more often)."""
    return st.integers(0, 9).flatmap(lambda i: bad if i == 5 else good)


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """data, or data cut short, with a byte changed or with bytes inserted."""
    how = draw(st.sampled_from(["as is", "as is", "as is", "cut", "change", "insert"]))
    if how == "as is" or not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    if how == "cut":
        return data[:at]
    if how == "change":
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]


@st.composite
def maybe_replaced(draw, document: dict, paths: list[tuple[str, ...]]) -> dict:
    """document with, one time in four, the value at one of paths replaced by an arbitrary JSON value."""
    if draw(st.integers(0, 4)) != 2:
        return document
    path = draw(st.sampled_from(paths))
    node = document
    for key in path[:-1]:
        if not isinstance(node, dict):
            return document
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        node[path[-1]] = draw(json_values)
    return document


def to_json_bytes(document) -> bytes:
    return json.dumps(document).encode("utf-8", "surrogatepass")


# ---- runc argv ----------------------------------------------------------------------------------------

ARGV_WORDS = ["create", "run", "start", "state", "delete", "kill", "exec", "--bundle", "-b", "--bundle=", "-bundle",
              "--root", "--log", "--log-format", "json", "text", "--pid-file", "--console-socket", "--", "-", "--debug",
              "--debug=false", "--debug=maybe", "--systemd-cgroup", "--preserve-fds", "--preserve-fds=0x1_0",
              "--no-pivot", "--detach", "-d", "--keep", "--help", "-h", "--version", "-v", "--criu", "--rootless",
              "--rootless=auto", "/nonexistent/bundle", "ctr-1", "---bundle", "--=x", "-=", "--bundle=/b", "-b=/b"]
runc_argv = st.lists(st.one_of(st.sampled_from(ARGV_WORDS), texts), max_size=12)

# ---- OCI config.json, the container's env and annotations ------------------------------------------------

ENV_NAMES = ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA", "NVIDIA_REQUIRE_ARCH",
             "NVIDIA_DISABLE_REQUIRE", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES",
             "NVIDIA_IMEX_CHANNELS", "CUDA_VERSION", "NVIDIA_REQUIRE_DRIVER", "DOCKER_RESOURCE_GPU", "PATH"]
env_entries = st.lists(st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(ENV_NAMES), texts), texts), max_size=8)
ANNOTATION_KEYS = ["cdi.k8s.io/gpu", "cdi.k8s.io/", "cdi.k8s.io/a_b.c-d", "cdi.k8s.io/" + "k" * 70, "other/key",
                   "cdi.k8s.io/x/y"]
annotations = st.dictionaries(st.one_of(st.sampled_from(ANNOTATION_KEYS), texts),
                              st.one_of(texts, json_values), max_size=4)
CAP_SETS = [[], ["CAP_SYS_ADMIN"], ["CAP_CHOWN", "CAP_SYS_ADMIN"]]
mounts = st.lists(st.fixed_dictionaries({"destination": st.one_of(
    st.sampled_from(["/var/run/nvidia-container-devices/0", "/var/run/nvidia-container-devices/all",
                     "/var/run/nvidia-container-devices/a/b", "/var/run/nvidia-container-devices/", "/data"]), texts),
    "source": st.sampled_from(["/dev/null", "/tmp"]), "type": st.just("bind")}), max_size=3)


@st.composite
def oci_configs(draw) -> dict:
    caps = draw(st.sampled_from(CAP_SETS))
    document = {"ociVersion": "1.0.2",
                "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["sh"],
                            "env": draw(env_entries), "cwd": "/",
                            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps}},
                "root": {"path": draw(st.sampled_from(["rootfs", "/", "../x", ""])), "readonly": False},
                "mounts": draw(mounts), "annotations": draw(annotations),
                "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["x", "prestart"]}]}
                if draw(st.booleans()) else {},
                "linux": {"devices": [], "resources": {"devices": [{"allow": False, "access": "rwm"}]}}}
    return draw(maybe_replaced(document, [("process",), ("process", "env"), ("process", "capabilities"),
                                          ("process", "capabilities", "bounding"), ("process", "user"), ("root",),
                                          ("mounts",), ("annotations",), ("hooks",), ("hooks", "prestart"),
                                          ("linux",), ("linux", "devices"), ("linux", "resources"), ("ociVersion",)]))


config_json_bytes = oci_configs().map(to_json_bytes).flatmap(damaged)

# ---- the OCI state on a hook's stdin ---------------------------------------------------------------------


@st.composite
def states(draw, bundle: str) -> bytes:
    document = {"ociVersion": "1.0.2", "id": draw(texts), "status": "creating",
                "pid": draw(st.one_of(st.integers(1, 1 << 22), st.integers(1, 1 << 22), st.integers(-2, 1 << 40),
                                      json_values)),
                draw(st.sampled_from(["bundle", "bundlePath"])): draw(st.one_of(
                    st.just(bundle), st.just(bundle), st.just(bundle + "/"), st.just("/nonexistent"), texts,
                    json_values)),
                "annotations": draw(annotations)}
    document = draw(maybe_replaced(document, [("id",), ("status",), ("annotations",), ("pid",)]))
    return draw(damaged(to_json_bytes(document)))


# ---- CDI specs -------------------------------------------------------------------------------------------

CDI_VERSIONS = ["0.3.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0"]
paths = mostly(st.sampled_from(["/dev/nvidia0", "/dev/null", "/usr/lib/libx.so", "/dev/../etc", "/a b"]), texts)
device_nodes = st.lists(st.fixed_dictionaries(
    {"path": paths},
    optional={"type": mostly(st.sampled_from(["c", "b"]), st.sampled_from(["u", "p", "x"])),
              "major": mostly(st.integers(0, 511), st.integers(-1, 1 << 33)),
              "minor": mostly(st.integers(0, 1 << 20), st.integers(-1, 1 << 33)),
              "permissions": mostly(st.sampled_from(["rwm", "r", "rw"]), st.sampled_from(["z", "", "rwmx"])),
              "uid": st.integers(-1, 1 << 33), "hostPath": paths}), max_size=3)
cdi_mounts = st.lists(st.fixed_dictionaries(
    {"hostPath": paths, "containerPath": paths},
    optional={"options": st.lists(st.sampled_from(["ro", "bind", "nosuid", "rbind", "x"]), max_size=3),
              "type": st.sampled_from(["bind", "tmpfs"])}), max_size=3)
cdi_hooks = st.lists(st.fixed_dictionaries(
    {"hookName": mostly(st.sampled_from(["createContainer", "prestart", "startContainer", "poststop"]),
                        st.sampled_from(["bogus", ""])),
     "path": mostly(st.just("/usr/bin/nvidia-cdi-hook"), texts),
     "env": mostly(st.lists(st.just("PATH=/bin"), min_size=1, max_size=2), st.lists(texts, max_size=2))},
    optional={"args": st.lists(texts, max_size=3), "timeout": st.integers(-1, 1 << 33)}), max_size=2)
container_edits = st.fixed_dictionaries({}, optional={
    "env": st.lists(mostly(st.sampled_from(["A=b", "NVIDIA_VISIBLE_DEVICES=void", "E="]), texts), max_size=3),
    "deviceNodes": device_nodes, "mounts": cdi_mounts, "hooks": cdi_hooks})
device_edits = mostly(st.fixed_dictionaries({"deviceNodes": device_nodes.filter(bool)}), container_edits)


@st.composite
def cdi_documents(draw) -> dict:
    document = {"cdiVersion": draw(mostly(st.sampled_from(CDI_VERSIONS), st.sampled_from(["9.9.9", "", "0.5"]))),
                "kind": draw(mostly(st.sampled_from(["nvidia.com/gpu", "example.com/x"]),
                                    st.one_of(st.sampled_from(["nvidia.com/gpu/x", "gpu", "a.b/c"]), texts))),
                "devices": draw(st.lists(st.fixed_dictionaries(
                    {"name": mostly(st.sampled_from(["0", "1", "1:0", "all", "gpu0", "GPU-1"]),
                                    st.one_of(st.sampled_from(["-x", ""]), texts)),
                     "containerEdits": device_edits}), min_size=1, max_size=3)),
                "containerEdits": draw(container_edits)}
    return draw(maybe_replaced(document, [("cdiVersion",), ("kind",), ("devices",), ("containerEdits",),
                                          ("containerEdits", "env"), ("containerEdits", "deviceNodes"),
                                          ("containerEdits", "mounts"), ("containerEdits", "hooks"),
                                          ("annotations",)]))


def _to_yaml(document) -> bytes:
    return yaml.safe_dump(document, allow_unicode=True).encode("utf-8", "surrogatepass")


# what YAML can say that JSON cannot: tags, anchors and aliases (a "billion laughs" among them)
YAML_SPECIALS = [b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: !!int 0\n  containerEdits: {}\n",
                 b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\ncontainerEdits:\n  deviceNodes:\n"
                 b"  - path: !!int /dev/x\n",
                 b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                 b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                 b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                 b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{name: x, containerEdits: {env: *f}}]\n",
                 b"cdiVersion: !!python/object/apply:os.system [true]\n", b"--- 1\n--- 2\n", b"&a [*a]\n",
                 b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: &d [{name: x, containerEdits: {}}]\n"
                 b"containerEdits: {env: [A=b]}\n<<: {x: *d}\n", b"\xef\xbb\xbfcdiVersion: '0.5.0'\n",
                 b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: 0x1f\n  containerEdits: {}\n"]
cdi_spec_json = cdi_documents().map(to_json_bytes).flatmap(damaged)
cdi_spec_yaml = st.one_of(cdi_documents().map(_to_yaml).flatmap(damaged), st.sampled_from(YAML_SPECIALS).flatmap(damaged))

# ---- config.toml -----------------------------------------------------------------------------------------

TOML_KEYS = {"": ["accept-nvidia-visible-devices-envvar-when-unprivileged",
                  "accept-nvidia-visible-devices-as-volume-mounts", "disable-require", "supported-driver-capabilities",
                  "swarm-resource", "unknown-key"],
             "nvidia-container-cli": ["root", "ldcache", "ldconfig", "no-cgroups", "path", "environment", "load-kmods",
                                      "user", "debug"],
             "nvidia-container-runtime": ["runtimes", "mode", "debug", "log-level", "unknown"],
             "nvidia-container-runtime.modes.cdi": ["spec-dirs", "default-kind", "annotation-prefixes"],
             "nvidia-container-runtime.modes.csv": ["mount-spec-path"],
             "nvidia-container-runtime-hook": ["path", "skip-mode-detection"],
             "nvidia-ctk": ["path"], "features": ["allow-ldconfig-from-container", "some-feature"], "bogus": ["x"]}
toml_values = st.recursive(st.one_of(
    st.booleans(), st.integers(), st.floats(allow_nan=True), st.sampled_from(
        ["auto", "cdi", "jit-cdi", "legacy", "csv", "@/sbin/ldconfig", "/sbin/ldconfig", "nvidia.com/gpu", "bad kind",
         "compute,utility", "/dev/null", "runc", "debug", ""]), st.text(max_size=20)),
    lambda inner: st.lists(inner, max_size=3), max_leaves=6)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON's, but for \u escapes of surrogates
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


@st.composite
def config_toml(draw) -> bytes:
    lines = []
    for table in draw(st.lists(st.sampled_from(list(TOML_KEYS)), max_size=4, unique=True)):
        if table:
            lines.append(f"[{table}]")
        for key in draw(st.lists(st.sampled_from(TOML_KEYS[table]), max_size=4, unique=True)):
            lines.append(f"{key} = {_toml_value(draw(toml_values))}")
    text = "\n".join(lines) + "\n"
    return draw(damaged(text.encode("utf-8", "surrogatepass")))


# ---- ld.so.cache -----------------------------------------------------------------------------------------

ld_entries = st.lists(st.tuples(st.sampled_from([0x0303, 0x0001, 0x0000, 0x0a03, -1, 0x7fff]),
                                st.sampled_from(["libcuda.so.1", "libnvidia-ml.so.1", "", "x" * 5000]),
                                st.sampled_from(["/usr/lib/libcuda.so.1", "/lib/x", "rel", "\udcff"]),
                                st.integers(0, (1 << 64) - 1)), max_size=5)


@st.composite
def ld_caches(draw) -> bytes:
    """A glibc new-format cache (optionally after an old-format block), built field by field; counts,
    offsets and the endianness byte are sometimes wrong, and the bytes are sometimes damaged."""
    entries = draw(ld_entries)
    strings, offsets = b"", []
    header_size, entry_size = 48, 24
    base = header_size + entry_size * len(entries)
    for _, soname, path, _ in entries:
        key = base + len(strings)
        strings += soname.encode("utf-8", "surrogateescape") + b"\0"
        value = base + len(strings)
        strings += path.encode("utf-8", "surrogateescape") + b"\0"
        offsets.append((key, value))
    count = draw(st.one_of(st.just(len(entries)), st.integers(0, (1 << 32) - 1)))
    endianness = draw(st.sampled_from([0, 2, 2, 1, 3, 255]))
    data = struct.pack("<20sIIB3xI12x", b"glibc-ld.so.cache1.1", count, len(strings), endianness, 0)
    for (flags, _, _, hwcap), (key, value) in zip(entries, offsets):
        if draw(st.integers(0, 9)) == 0:
            key = draw(st.integers(0, (1 << 32) - 1))
        data += struct.pack("<iIIIQ", flags, key, value, 0, hwcap)
    data += strings
    if draw(st.booleans()):
        old_count = draw(st.one_of(st.just(0), st.integers(0, (1 << 32) - 1)))
        old = struct.pack("<11sxI", b"ld.so-1.7.0", old_count) + b"\0" * 12 * min(old_count, 4)
        data = old + b"\0" * (-len(old) % 8) + data
    return draw(damaged(data))


# ---- /proc/driver/nvidia-caps/mig-minors -----------------------------------------------------------------

mig_minor_lines = st.one_of(
    st.builds(lambda g, i, m: f"gpu{g}/gi{i}/access {m}", st.integers(-1, 300), st.integers(-1, 20), texts),
    st.builds(lambda g, i, c, m: f"gpu{g}/gi{i}/ci{c}/access {m}", st.integers(0, 300), st.integers(0, 20),
              st.integers(0, 8), st.integers(0, 1 << 70)),
    st.builds(lambda k, m: f"{k} {m}", st.sampled_from(["config", "monitor", "gpu0/gi", "gpuX/giY/access", ""]),
              st.one_of(st.integers(-5, 1 << 70).map(str), texts)), texts)
mig_minors = st.one_of(
    st.lists(mig_minor_lines, max_size=12).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")),
    st.binary(max_size=200)).flatmap(damaged)
