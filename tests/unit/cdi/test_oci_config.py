"""config.json of the wrong shape (valid JSON, wrong types, lone surrogates, deep nesting) is one line
naming the member, `config.json: "linux" is not an object (linux)`, in the shim and the prestart hook,
never an unexpected TypeError/AttributeError. Fixed cases, random mutations of a full config.json
(fixed seed) through everything the shim does with it, and the programs as installed."""
from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from cdi import json_codec
from cdi.apply import apply_edits
from cdi.config import Config
from cdi.errors import CdiError
from cdi.oci_config import MAX_DEPTH, OciConfigError, check_config_json
from cdi.request import resolve_device_request
from cdi.spec import ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice
from runtime_shim.modes import apply_legacy, drop_legacy_hooks
from tests.support.json_mutation import member_paths, replace_or_remove

BIN = Path(sys.executable).parent

FULL = {
    "ociVersion": "1.0.2",
    "process": {"user": {"uid": 1000, "gid": 1000, "additionalGids": [5]}, "args": ["sh"],
                "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"], "cwd": "/",
                "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"]}},
    "root": {"path": "rootfs", "readonly": False},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"]}],
    "annotations": {"cdi.k8s.io/x": "vendor.example/cls=dev0", "other": "v"},
    "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["hook", "prestart"],
                            "env": ["PATH=/bin"], "timeout": 5}]},
    "linux": {"devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
              "resources": {"devices": [{"allow": False, "access": "rwm"}]},
              "intelRdt": {"closID": "x"}, "netDevices": {"eth1": {"name": "e"}},
              "namespaces": [{"type": "mount"}]},
}
EDITS = ContainerEdits(env=["A=1"], device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")],
                       mounts=[Mount(host_path="/a", container_path="/b", options=["ro"])],
                       hooks=[Hook(hook_name="createContainer", path="/bin/true", env=["PATH=/bin"])],
                       intel_rdt=IntelRdt(clos_id="c"), additional_gids=[7],
                       net_devices=[NetDevice(host_interface_name="eth0", name="e0")])


def use(document: object) -> None:
    """What the shim and the hook do with a config.json: check, request, every edit, legacy, write."""
    check_config_json(document)
    resolve_device_request(document, Config())
    result = drop_legacy_hooks(apply_edits(document, EDITS))
    json_codec.dumps_compact(apply_legacy(result, "/bin/hook", {"PATH": "/bin"})).encode("utf-8")


def test_a_full_config_json_is_used_as_it_is():
    use(copy.deepcopy(FULL))


@pytest.mark.parametrize("document, message", [
    ({"linux": "x"}, 'config.json: "linux" is not an object (linux)'),
    ({"mounts": [{"destination": ["a"]}]}, 'config.json: "destination" is not a string (mounts[0].destination)'),
    ({"mounts": {"a": 1}}, 'config.json: "mounts" is not a list (mounts)'),
    ({"mounts": [5]}, 'config.json: an item of "mounts" is not an object (mounts[0])'),
    ({"process": "x"}, 'config.json: "process" is not an object (process)'),
    ({"process": {"env": ["A=1", 5]}}, 'config.json: an item of "env" is not a string (process.env[1])'),
    ({"process": {"env": "A=1"}}, 'config.json: "env" is not a list (process.env)'),
    ({"process": {"capabilities": {"bounding": "CAP_SYS_ADMIN"}}},
     'config.json: "bounding" is not a list (process.capabilities.bounding)'),
    ({"process": {"user": {"uid": "0"}}}, 'config.json: "uid" is not an integer (process.user.uid)'),
    ({"process": {"user": {"gid": True}}}, 'config.json: "gid" is not an integer (process.user.gid)'),
    ({"process": {"user": {"additionalGids": [1.5]}}},
     'config.json: an item of "additionalGids" is not an integer (process.user.additionalGids[0])'),
    ({"process": {"user": {"uid": -1}}}, 'config.json: "uid" is not an id from 0 to 4294967295 (process.user.uid)'),
    ({"process": {"user": {"gid": 2 ** 32}}},
     'config.json: "gid" is not an id from 0 to 4294967295 (process.user.gid)'),
    ({"process": {"user": {"additionalGids": [0, 10 ** 150]}}},
     'config.json: an item of "additionalGids" is not an id from 0 to 4294967295 (process.user.additionalGids[1])'),
    ({"process": {"user": {"uid": float("nan")}}}, 'config.json: "uid" is not an integer (process.user.uid)'),
    ({"annotations": []}, 'config.json: "annotations" is not an object (annotations)'),
    ({"annotations": {"cdi.k8s.io/a": 1}}, 'config.json: "cdi.k8s.io/a" is not a string (annotations.cdi.k8s.io/a)'),
    ({"hooks": []}, 'config.json: "hooks" is not an object (hooks)'),
    ({"hooks": {"prestart": {}}}, 'config.json: "prestart" is not a list (hooks.prestart)'),
    ({"hooks": {"createContainer": ["x"]}},
     'config.json: an item of "createContainer" is not an object (hooks.createContainer[0])'),
    ({"hooks": {"prestart": [{"path": 1}]}}, 'config.json: "path" is not a string (hooks.prestart[0].path)'),
    ({"hooks": {"prestart": [{"args": [None]}]}},
     'config.json: an item of "args" is not a string (hooks.prestart[0].args[0])'),
    ({"linux": {"devices": {}}}, 'config.json: "devices" is not a list (linux.devices)'),
    ({"linux": {"devices": [{"path": 1}]}}, 'config.json: "path" is not a string (linux.devices[0].path)'),
    ({"linux": {"resources": []}}, 'config.json: "resources" is not an object (linux.resources)'),
    ({"linux": {"resources": {"devices": [1]}}},
     'config.json: an item of "devices" is not an object (linux.resources.devices[0])'),
    ({"linux": {"netDevices": []}}, 'config.json: "netDevices" is not an object (linux.netDevices)'),
    ({"root": {"path": 5}}, 'config.json: "path" is not a string (root.path)'),
    ({"x": ["\ud800"]}, "config.json: a string holds a lone surrogate (x[0])"),
    ({"process": {"env": ["A=\udfff"]}}, "config.json: a string holds a lone surrogate (process.env[0])"),
    ({"a": {"\udc80": 1}}, "config.json: a string holds a lone surrogate (a)"),
])
def test_wrong_shapes_name_the_member(document, message):
    with pytest.raises(OciConfigError) as info:
        use(document)
    assert str(info.value) == message


def test_null_is_an_absent_member_as_go_reads_it():
    use({"process": None, "linux": None, "hooks": None, "mounts": None, "annotations": None})
    use({"process": {"env": None, "user": None}, "linux": {"resources": None, "devices": None},
         "hooks": {"createContainer": None, "prestart": None}})


def test_nesting_is_bounded():
    def nested(depth):
        document = inner = {}
        for _ in range(depth - 1):
            inner["x"] = {}
            inner = inner["x"]
        return document

    use(nested(MAX_DEPTH))
    with pytest.raises(OciConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        use(nested(MAX_DEPTH + 1))


# -- random mutations -------------------------------------------------------------------------------

SCALARS = [None, True, 0, 7, -1, 2 ** 70, 1.5, "", "x", "/dev/x", "A=1", "\ud800", "CAP_SYS_ADMIN", [], {}]
KEYS = ["path", "env", "destination", "source", "args", "uid", "devices", "prestart", "z"]


def test_random_shapes_are_used_or_refused_in_one_line():
    rng = random.Random(16_5)
    refused = 0
    for _ in range(2000):
        document = copy.deepcopy(FULL)
        for _ in range(rng.randrange(1, 4)):
            replace_or_remove(document, rng.choice(member_paths(document)[1:]), rng, SCALARS, KEYS)
        try:
            use(document)
        except CdiError as exc:
            refused += 1
            assert "\n" not in str(exc)
    assert 0 < refused < 2000


# -- the programs -----------------------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000
PROGRAM_CASES = [
    ('"linux": "x"', 'config.json: "linux" is not an object (linux)'),
    ('"mounts": [{"destination": ["/a"], "source": "/b"}]',
     'config.json: "destination" is not a string (mounts[0].destination)'),
    ('"annotations": {"a": "\\udc80"}', "config.json: a string holds a lone surrogate (annotations.a)"),
    ('"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "user": {"uid": 4294967296, "gid": 0}}',
     'config.json: "uid" is not an id from 0 to 4294967295 (process.user.uid)'),
    ('"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "user": {"uid": 0, "gid": -1}}',
     'config.json: "gid" is not an id from 0 to 4294967295 (process.user.gid)'),
    ('"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "user": {"uid": NaN, "gid": 0}}',
     'config.json: "uid" is not an integer (process.user.uid)'),
]


def config_json(member: str) -> str:
    process = "" if member.startswith('"process"') else '"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, '
    return '{"ociVersion": "1.0.2", "root": {"path": "rootfs"}, ' + process + member + "}"


def one_line(stderr: str, program: str) -> str:
    line, = stderr.splitlines()
    assert line.startswith(f"{program}: error: ")
    return line[len(f"{program}: error: "):]


@pytest.mark.skipif(not (BIN / "nvidia-container-runtime").exists(), reason="needs the launchers (make venv)")
@pytest.mark.parametrize("member, message", PROGRAM_CASES + [('"x": ' + DEEP, "nested too deeply")])
def test_the_shim_and_the_hook_say_it_in_one_line(tmp_path, member, message):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(config_json(member))
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-runtime]\nruntimes = ["/bin/true"]\nmode = "legacy"\n')
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(config),
           "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache")}
    shim = subprocess.run([str(BIN / "nvidia-container-runtime"), "create", "--bundle", str(bundle), "ctr"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert shim.returncode == 1
    assert message in one_line(shim.stderr, "nvidia-container-runtime")
    hook = subprocess.run([str(BIN / "nvidia-container-runtime-hook"), "prestart"], capture_output=True, text=True,
                          env=env, input=json.dumps({"bundle": str(bundle), "pid": 1}), timeout=60)
    assert hook.returncode == 1
    text = one_line(hook.stderr, "nvidia-container-runtime-hook")
    assert message in text or (member.startswith('"x"') and "invalid container config" in text)
