"""nvidia-container-runtime-hook's program side: arguments as NVIDIA's hook takes them, poststart and
poststop, the no-GPU path (exit 0, nothing touched, NVML never loaded), one-line errors, and the
privileges it keeps."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hook.prestart import KEPT_CAPABILITIES, NOT_INHERITED, UsageError, parse_argv
from libcontainer_c.privileges import capability_mask

HOOK = Path(sys.executable).parent / "nvidia-container-runtime-hook"
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("argv, expected", [
    (["prestart"], ("prestart", None)),
    (["-config", "/c.toml", "prestart"], ("prestart", "/c.toml")),
    (["--config=/c.toml", "-debug", "poststop"], ("poststop", "/c.toml")),
])
def test_arguments(argv, expected):
    assert parse_argv(argv) == expected


@pytest.mark.parametrize("argv, message", [
    ([], "missing command"), (["-x", "prestart"], "unknown flag '-x'"), (["-config"], "needs a value"),
    (["prestart", "extra"], "unexpected argument 'extra'"),
])
def test_bad_arguments(argv, message):
    with pytest.raises(UsageError, match=message):
        parse_argv(argv)


def hook(*args: str, state=None, env=None) -> subprocess.CompletedProcess:
    if not HOOK.exists():
        pytest.skip("hook launcher not installed (make venv)")
    data = state if isinstance(state, str) else json.dumps(state or {})
    return subprocess.run([str(HOOK), *args], input=data, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.mark.parametrize("command", ["poststart", "poststop"])
def test_poststart_and_poststop_do_nothing(command):
    result = hook(command, state="garbage")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_unknown_command_is_one_line():
    result = hook("create")
    assert result.returncode == 1
    assert result.stderr == ("nvidia-container-runtime-hook: error: unknown command 'create' "
                             "(expected prestart, poststart or poststop)\n")


def bundle_with(tmp_path, env, root_path="rootfs") -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": root_path}, "process": {"env": env}}))
    return bundle


@pytest.mark.parametrize("state, message", [
    ("not json", "invalid container state"),
    ({"pid": 1}, "container state has no absolute bundle path (stdin)"),
    ({"bundle": "relative", "pid": 1}, "no absolute bundle path"),
    ({"bundle": "/nonexistent-bundle", "pid": 1}, "cannot read the container's config: No such file or directory"),
])
def test_bad_state_is_one_line(state, message):
    result = hook("prestart", state=state)
    assert result.returncode == 1
    assert result.stderr.startswith("nvidia-container-runtime-hook: error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1


def test_config_json_without_root_path(tmp_path):
    bundle = bundle_with(tmp_path, [], root_path="")
    result = hook("prestart", state={"bundle": str(bundle), "pid": 1})
    assert "container config has no root.path" in result.stderr and result.returncode == 1


def test_no_gpu_request_exits_0_without_loading_nvml(tmp_path):
    """In-process, to see what was imported: no pynvml, no cdi.nvml, no discovery."""
    bundle = bundle_with(tmp_path, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"])
    code = ("import io, json, sys; sys.stdin = io.TextIOWrapper(io.BytesIO(json.dumps("
            f"{{'bundle': {str(bundle)!r}, 'pid': 1}}).encode())); "
            "from hook.prestart import main; rc = main(['prestart']); "
            "print(rc, sorted(m for m in sys.modules if m.startswith(('pynvml', 'cdi.nvml', 'cdi.discover', "
            "'hook.inject', 'ctypes'))))")
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=REPO,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                                 "NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml")})
    assert result.stdout.strip() == "0 []", result.stderr


def test_a_gpu_request_with_no_driver_fails_in_one_line(tmp_path):
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{tmp_path / "missing"}"\n')
    result = hook("prestart", state={"bundle": str(bundle), "pid": 1},
                  env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
    assert result.returncode == 1
    assert result.stderr.startswith("nvidia-container-runtime-hook: error: cannot use driver root: "
                                    "No such file or directory")
    assert "nvidia-container-cli.root" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("allowed", [False, True])
def test_a_container_ldconfig_is_refused_allowed_or_not(tmp_path, allowed):
    """ldconfig without "@" names the image's binary: refused even with the feature set (it would run
    as root in the host's namespaces; cdi.config.ldconfig_host_path), before the driver is read; it was
    run as the HOST's file of that name (issue 22, item 9)."""
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{tmp_path / "missing"}"\nldconfig = "/sbin/ldconfig"\n'
                      f'[features]\nallow-ldconfig-from-container = {"true" if allowed else "false"}\n')
    result = hook("prestart", state={"bundle": str(bundle), "pid": 1}, env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("nvidia-container-runtime-hook: error: ldconfig '/sbin/ldconfig' would run a "
                                    "binary from the container image")
    assert result.stderr.endswith(f"use '@/sbin/ldconfig' for the host's ({config})\n") == allowed
    assert "even with features.allow-ldconfig-from-container" in result.stderr if allowed else True


def test_malformed_config_is_one_line(tmp_path):
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    config = tmp_path / "config.toml"
    config.write_text("disable-require = 'yes'\n")
    result = hook("-config", str(config), "prestart", state={"bundle": str(bundle), "pid": 1})
    assert result.returncode == 1
    assert result.stderr == (f"nvidia-container-runtime-hook: error: disable-require must be a boolean, not str "
                             f"({config})\n")


def own_status_field(name: str) -> str:
    with open("/proc/self/status") as status:
        return next(line.split(":\t", 1)[1].strip() for line in status if line.startswith(name + ":\t"))


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping capabilities is only visible as root")
def test_privileges_after_the_drop():
    code = ("from hook.prestart import drop_privileges; drop_privileges(); "
            "print(open('/proc/self/status').read())")
    status = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=REPO,
                            env={"PYTHONPATH": str(REPO)}, check=True).stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    # exactly the kept ones stay, of those root had: a container's root (or an older kernel) may lack some,
    # e.g. CAP_BPF under a Docker that does not grant it with --privileged
    had = int(own_status_field("CapBnd"), 16)
    kept = capability_mask(KEPT_CAPABILITIES) & had
    for field in ("CapEff", "CapPrm"):
        assert int(fields[field], 16) == kept, field
    # setuid and setgid (setfsuid in a container with a user namespace) are not for what the hook execs
    assert int(fields["CapBnd"], 16) == kept & ~capability_mask(NOT_INHERITED)
    assert int(fields["CapInh"], 16) == 0 and int(fields["CapAmb"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    # what the container must never get from us
    for name in ("sys_module", "sys_rawio", "mknod", "setuid", "net_raw"):
        assert not int(fields["CapBnd"], 16) & capability_mask([name]), name


@pytest.mark.parametrize("key", ["bundle", "bundlePath"])
def test_state_names_the_bundle_either_way(tmp_path, key):
    bundle = bundle_with(tmp_path, ["PATH=/bin"])   # no GPU asked for: nothing else is read
    result = hook("prestart", state={key: str(bundle), "pid": 1, "status": "creating"},
                  env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml")})
    assert (result.returncode, result.stderr) == (0, "")


def test_the_gpu_path_imports_no_dataclasses_logging_nor_a_kept_configs_toml_parser(tmp_path):
    """Speed (issue 7): the modules a GPU request runs through import neither dataclasses (and inspect)
    nor logging; with the config's document kept (cdi.config_cache) no TOML parser and no json package
    either (the state, config.json and the kept document are read by cdi.json_codec). The run
    stops at the missing driver root; the injection modules are imported as inject_request would."""
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{tmp_path / "missing"}"\n')
    state = json.dumps({"bundle": str(bundle), "pid": 1}).encode()
    code = ("import io, sys\n"
            f"sys.path[:0] = {[str(REPO), *sys.path]!r}\n"
            f"sys.stdin = io.TextIOWrapper(io.BytesIO({state!r}))\n"
            "import cdi.config_cache; cdi.config_cache.RECENT_NS = 0   # the config was written just now\n"
            "from hook.prestart import run\n"
            "rc = run(['prestart'])\n"
            "import cdi.driver_root, cdi.nvml, cdi.nvml_binding, cdi.selection, hook.inject, hook.proc_driver\n"
            "import libcontainer_c.batch, libcontainer_c.ldconfig, libcontainer_c.device_cgroup\n"
            "print(rc, sorted(m for m in ('dataclasses', 'inspect', 'logging', 'tomllib', 'json') if m in sys.modules))\n")
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(config),
           "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, env=env)
            for _ in range(2)]
    # parsed (a plain config.toml by cdi.toml_plain, without tomllib) and kept
    assert runs[0].stdout.split("\n")[0] == "1 ['json']", runs[0].stderr
    assert runs[1].stdout.split("\n")[0] == "1 []", runs[1].stderr
    assert "cannot use driver root" in runs[1].stderr


@pytest.mark.parametrize("flag", ["--help", "-h", "-help"])
def test_help_is_the_usage_line_and_success(flag):
    done = subprocess.run([sys.executable, "-m", "hook.prestart", flag], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: nvidia-container-runtime-hook [-config FILE]")


def test_crun_s_bundle_slash_is_the_waiting_init_s_directory(tmp_path):
    """crun hands prestart hooks `"bundle": "/"` in a container with a user namespace and devices: the
    bundle is then the directory the init (the state's pid) was started in."""
    from hook.prestart import load_container

    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    init = subprocess.Popen(["sleep", "60"], cwd=bundle)
    try:
        oci, rootfs, pid = load_container({"bundle": "/", "pid": init.pid, "status": "created"})
    finally:
        init.kill()
        init.wait()
    assert (rootfs, pid) == (str(bundle / "rootfs"), init.pid)
    assert oci["process"]["env"] == ["NVIDIA_VISIBLE_DEVICES=0"]


def test_bundle_slash_with_an_init_that_is_gone_is_one_line():
    from hook.cdi_hook import HookError
    from hook.prestart import load_container

    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    with pytest.raises(HookError) as caught:
        load_container({"bundle": "/", "pid": int(gone)})
    assert str(caught.value) == ("the container state's bundle is /, and the init's directory cannot be read: "
                                 f"No such file or directory (/proc/{gone}/cwd)")


@pytest.fixture(scope="module")
def simulated_host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("building the simulated host needs root (mknod)")
    from tests.e2e.hook_support import make_simulated_host

    host = tmp_path_factory.mktemp("prestart-host") / "host"
    make_simulated_host(host)
    return host


@pytest.mark.parametrize("init", ["pid 1", "a process of the hook's namespace"])
def test_a_pid_that_is_no_containers_init_is_refused(simulated_host, tmp_path, init):
    """Injecting into pid 1's mount namespace, or into the hook's own, would mount on the host what belongs
    in the container: refused, nothing mounted. The hook runs in a pid namespace with its own /proc,
    whose pid 1 is the shell that started it, in a private mount namespace: what a hook without the check
    mounts (it did: GPU 0's node and the driver files) stays there. No device cgroup is touched
    (no-cgroups: the neighbour's cgroup is the test's)."""
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{simulated_host}"\nno-cgroups = true\n')
    pid = "1" if init == "pid 1" else "$neighbour"
    script = (f"sleep 60 & neighbour=$!\n'{HOOK}' -config '{config}' prestart <<EOF\n"
              f'{{"bundle": "{bundle}", "pid": {pid}, "status": "creating"}}\nEOF\n'
              f"rc=$?; kill $neighbour; grep -c ' {bundle}/rootfs/' /proc/self/mountinfo; exit $rc")
    result = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--propagation", "private",
                             "sh", "-c", script], capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.stdout == "0\n", result               # nothing mounted in the namespace the hook was in
    assert result.returncode == 1
    if init == "pid 1":
        assert result.stderr == ("nvidia-container-runtime-hook: error: the container state's pid is 1, not a "
                                 "container's init: refusing to work in the machine's mount namespace (stdin)\n")
    else:
        assert result.stderr.startswith("nvidia-container-runtime-hook: error: the container's init shares the "
                                        "hook's mount namespace: refusing to work outside a container's (/proc/")
