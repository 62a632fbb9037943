"""`nvidia-ctk cdi generate` as users run it (a subprocess: one NVML per process)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cdi.nvml import NO_DRIVER_HINT
from cdi.spec_version import minimum_version_of, version_key
from cdi.validate import validate_document

NVIDIA_CTK = str(Path(sys.executable).parent / "nvidia-ctk")


def generate(*args, env=None, check=True):
    result = subprocess.run([NVIDIA_CTK, "cdi", "generate", *args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def spec_of(host, *args, fmt="json"):
    out = generate("--driver-root", str(host), "--format", fmt, *args).stdout
    return json.loads(out) if fmt == "json" else yaml.safe_load(out)


def names(document):
    return [d["name"] for d in document["devices"]]


@pytest.fixture(scope="module")
def uuids(sim_inventory):
    gpu0, gpu1 = sim_inventory.gpus
    return gpu0.uuid, gpu1.uuid, gpu1.mig_devices[0].uuid, gpu1.mig_devices[1].uuid


@pytest.mark.parametrize("strategies, expected", [
    # GPU 1 is in MIG mode: it is described by its MIG devices, not as a whole GPU (as NVIDIA's tool)
    ([], ["0", "G0", "1:0", "M0", "1:1", "M1", "all"]),          # default: index and uuid
    (["index"], ["0", "1:0", "1:1", "all"]),
    (["uuid"], ["G0", "M0", "M1", "all"]),
    (["type-index"], ["gpu0", "mig1:0", "mig1:1", "all"]),
])
def test_names_for_each_strategy(sim_host, uuids, strategies, expected):
    args = [a for s in strategies for a in ("--device-name-strategy", s)]
    document = spec_of(sim_host, *args)
    by_alias = dict(zip(("G0", "G1", "M0", "M1"), uuids))
    assert names(document) == [by_alias.get(n, n) for n in expected]
    assert document["kind"] == "nvidia.com/gpu"


def test_yaml_names_stay_strings_and_the_document_is_schema_valid_at_the_oldest_version(sim_host):
    text = generate("--driver-root", str(sim_host)).stdout   # YAML is the default on stdout
    assert 'name: "1:0"' in text and 'name: "0"' in text
    document = yaml.safe_load(text)   # YAML 1.1: unquoted 1:0 would come back as the integer 60
    assert all(isinstance(n, str) for n in names(document))
    assert "1:0" in names(document) and "0" in names(document)
    assert validate_document(document, "generated") == []
    assert document["cdiVersion"] == minimum_version_of(document)[0] == "0.5.0"  # hostPath, digit names
    assert version_key(document["cdiVersion"]) <= version_key("0.5.0")  # podman 4.3 accepts <= 0.5.0


@pytest.mark.parametrize("strategies", [[], ["type-index"], ["index", "uuid", "type-index"]])
def test_the_yaml_spec_is_pyyamls_text_written_without_pyyaml(sim_host, strategies, tmp_path):
    """cdi.yaml_plain writes a generated spec, byte for byte what PyYAML (cdi.spec_yaml) writes for the
    same document, and `cdi generate` then imports none of PyYAML, jsonschema, click (ctk.fast_path),
    logging or tempfile (their imports cost more than the rest of the command)."""
    from cdi.spec_yaml import dump_yaml_document
    from cdi.yaml_plain import dump_plain_yaml

    args = [f"--device-name-strategy={s}" for s in strategies]
    document = spec_of(sim_host, *args)
    text = generate("--driver-root", str(sim_host), *args).stdout
    assert text == dump_yaml_document(document) == dump_plain_yaml(document)
    probe = ("import sys\n"
             "sys.argv = ['nvidia-ctk', 'cdi', 'generate', '--driver-root', sys.argv[1], '--output', *sys.argv[2:]]\n"
             "from ctk.main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('yaml', 'jsonschema', 'logging', 'tempfile', 'click') if m in sys.modules),"
             " file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", probe, str(sim_host), str(tmp_path / "spec.yaml"), *args],
                         capture_output=True, text=True)
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr
    assert (tmp_path / "spec.yaml").read_text() == text


def test_common_edits_and_device_edits(sim_host):
    document = spec_of(sim_host)
    common = document["containerEdits"]
    assert common["env"] == ["NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu", "NVIDIA_VISIBLE_DEVICES=void"]
    assert [n["path"] for n in common["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm",
                                                          "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
    (hook,) = common["hooks"]
    assert hook["hookName"] == "createRuntime" and hook["env"]
    assert "update-ldcache" in hook["args"] and "create-symlinks" in hook["args"]
    # 32-bit libraries are left out, as NVIDIA's generator does
    assert not any("i386" in m["containerPath"] for m in common["mounts"])
    zero = next(d for d in document["devices"] if d["name"] == "0")["containerEdits"]
    drm = os.major(os.stat(f"{sim_host}/dev/dri/card1").st_rdev)
    # the GPU's node and (a spec serves graphics too) its DRM nodes
    assert zero == {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": f"{sim_host}/dev/nvidia0", "type": "c",
                                     "major": 195, "minor": 0},
                                    {"path": "/dev/dri/card1", "hostPath": f"{sim_host}/dev/dri/card1", "type": "c",
                                     "major": drm, "minor": 1},
                                    {"path": "/dev/dri/renderD128", "hostPath": f"{sim_host}/dev/dri/renderD128",
                                     "type": "c", "major": drm, "minor": 128}]}


def test_nvidia_cdi_hook_path_of_nvidias_program_gets_its_argv(sim_host, tmp_path):
    """A spec for NVIDIA's nvidia-cdi-hook: one entry per subcommand in its spelling, and a warning
    (our chained argv made every container start fail there: `flag provided but not defined: -folder`)."""
    theirs = tmp_path / "nvidia-cdi-hook"
    theirs.write_bytes(b"\x7fELF not ours")
    theirs.chmod(0o755)
    result = generate("--driver-root", str(sim_host), "--format", "json", "--nvidia-cdi-hook-path", str(theirs))
    assert result.stderr.startswith(f"nvidia-ctk: WARNING: {theirs} is not this toolkit's nvidia-cdi-hook")
    hooks = json.loads(result.stdout)["containerEdits"]["hooks"]
    # no update-application-profile: NVIDIA's hooks before 1.20 refuse it
    assert [h["args"][1] for h in hooks] == ["create-symlinks", "enable-cuda-compat", "update-ldcache",
                                             "disable-device-node-modification"]
    assert all(h["path"] == str(theirs) and h["env"] for h in hooks)


def test_device_ids_and_no_all_device(sim_host, uuids):
    document = spec_of(sim_host, "--device-id", "1:0", "--device-id", uuids[0], "--no-all-device")
    assert names(document) == ["0", uuids[0], "1:0", uuids[2]]


def test_output_file_is_written_atomically_with_mode_0644(sim_host, tmp_path):
    out = tmp_path / "nvidia.json"
    old_umask = os.umask(0o077)
    try:
        result = generate("--driver-root", str(sim_host), "--output", str(out))
    finally:
        os.umask(old_umask)
    assert result.stdout == ""
    # one line naming what was written (issue 27.7: it said nothing), as NVIDIA's info log does
    assert result.stderr == f"nvidia-ctk: generated CDI spec with version 0.5.0: 7 nvidia.com/gpu devices in {out}\n"
    assert (out.stat().st_mode & 0o777) == 0o644
    assert json.loads(out.read_text())["kind"] == "nvidia.com/gpu"   # JSON by extension
    assert os.listdir(tmp_path) == ["nvidia.json"]                     # no temp file left behind
    dash = generate("--driver-root", str(sim_host), "--output", "-", "--format", "json")
    assert json.loads(dash.stdout)["devices"]


@pytest.mark.parametrize("flags, says", [(["-q"], False), (["--quiet", "-d"], False), (["-d"], True)])
def test_global_debug_and_quiet_as_nvidias_tool(sim_host, tmp_path, flags, says):
    """Issue 27.2: NVIDIA's global -d/--debug and -q/--quiet (errors only, over --debug)."""
    out = tmp_path / "nvidia.yaml"
    done = subprocess.run([NVIDIA_CTK, *flags, "cdi", "generate", "--driver-root", str(sim_host), "--output", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and out.exists()
    assert ("nvidia-ctk: generated CDI spec" in done.stderr) == says and (says or done.stderr == "")


def test_an_output_that_is_a_fifo_or_device_is_refused_and_left_alone(sim_host, tmp_path):
    """The spec is renamed over its path: that would put a regular file where a device node or FIFO was
    (`--output /dev/null` replaced the host's /dev/null)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for target in (fifo, device, tmp_path / "link-to-null"):
        if target.name == "link-to-null":
            target.symlink_to(device)
        result = generate("--driver-root", str(sim_host), "--output", str(target), check=False)
        assert result.returncode == 1
        assert result.stderr == (f"nvidia-ctk: error: not a regular file: writing the spec (a new file renamed "
                                 f"over the path) would replace it ({target})\n")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and stat.S_ISCHR(device.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link-to-null", "null"]   # no temp file left


def test_missing_folders_of_the_output_are_made_mode_0755(sim_host, tmp_path):
    """A fresh host has no /etc/cdi (issue 14, item 14): the folders are made, 0755 whatever the umask."""
    out = tmp_path / "etc" / "cdi" / "nvidia.yaml"
    old_umask = os.umask(0o077)
    try:
        result = generate("--driver-root", str(sim_host), f"--output={out}")
    finally:
        os.umask(old_umask)
    assert result.stderr.startswith("nvidia-ctk: generated CDI spec with version ") and result.stderr.count("\n") == 1
    assert yaml.safe_load(out.read_text())["kind"] == "nvidia.com/gpu"
    assert [(p.stat().st_mode & 0o777) for p in (out.parent.parent, out.parent, out)] == [0o755, 0o755, 0o644]


def test_vendor_class_and_hook_path(sim_host):
    document = spec_of(sim_host, "--vendor", "example.com", "--class", "accel",
                       "--nvidia-cdi-hook-path", "/opt/gct/bin/nvidia-cdi-hook")
    assert document["kind"] == "example.com/accel"
    assert document["containerEdits"]["hooks"][0]["path"] == "/opt/gct/bin/nvidia-cdi-hook"


def test_default_hook_path_is_the_one_next_to_nvidia_ctk(sim_host):
    hook = spec_of(sim_host)["containerEdits"]["hooks"][0]["path"]
    beside = Path(NVIDIA_CTK).parent / "nvidia-cdi-hook"
    assert hook == (str(beside) if beside.exists() else "/usr/bin/nvidia-cdi-hook")


def test_driver_root_from_the_environment(sim_host, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("")
    result = generate("--format", "json", env={"NVIDIA_CTK_DRIVER_ROOT": str(sim_host),
                                               "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
    assert json.loads(result.stdout)["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] == \
        f"{sim_host}/dev/nvidia0"


@pytest.mark.parametrize("args, message", [
    (["--device-id", "7"], "unknown device id '7': GPU index 7 out of range, this host has 2 GPUs (0-1) (--device-id)"),
    (["--device-id", "../x"], "malformed device id '../x' (--device-id)"),
    (["--vendor", "1bad"], "invalid vendor '1bad'"),
    (["--format", "json", "--output", "x.yaml"], "--format json does not match the file's extension (x.yaml)"),
    (["--output", "/dev/null/cdi/x.json"], "cannot write the spec: Not a directory (/dev/null/cdi/x.json)"),
    (["--nvidia-cdi-hook-path", "relative/hook"], "the hook path must be absolute"),
])
def test_bad_input_is_one_line(sim_host, args, message):
    result = generate("--driver-root", str(sim_host), *args, check=False)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("nvidia-ctk: error: ") and message in lines[-1], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_root_without_a_driver_is_one_line(tmp_path):
    result = generate("--driver-root", str(tmp_path), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == f"nvidia-ctk: error: no NVIDIA driver: libnvidia-ml.so.1 not found in the " \
                                    f"driver root; {NO_DRIVER_HINT} ({tmp_path})"


def test_configured_ldconfig_reaches_the_hook_and_a_container_path_is_refused(sim_host, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-cli]\nldconfig = "@/usr/sbin/ldconfig.real"\n')
    env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
    out = generate("--driver-root", str(sim_host), "--format", "json", env=env).stdout
    args = json.loads(out)["containerEdits"]["hooks"][0]["args"]
    assert args[args.index("--ldconfig-path") + 1] == "@/usr/sbin/ldconfig.real"
    config.write_text('[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"\n'
                      '[features]\nallow-ldconfig-from-container = true\n')
    result = generate("--driver-root", str(sim_host), env=env, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "nvidia-ctk: error: ldconfig '/sbin/ldconfig' would run a binary from the container image as root on the "
        "host; this toolkit refuses that even with features.allow-ldconfig-from-container: use '@/sbin/ldconfig' "
        f"for the host's ({config})")


def test_nvidias_other_flag_spellings(sim_host):
    """Issue 27.2: --cdi-vendor/--cdi-class (NVIDIA's aliases), --mode auto/nvml, --ldconfig-path."""
    document = spec_of(sim_host, "--cdi-vendor", "example.com", "--cdi-class", "accel", "--mode", "nvml",
                       "--ldconfig-path", "/usr/sbin/ldconfig.real")
    assert document["kind"] == "example.com/accel"
    assert document == spec_of(sim_host, "--vendor=example.com", "--class=accel", "--mode=auto",
                               "--ldconfig-path=@/usr/sbin/ldconfig.real")
    args = document["containerEdits"]["hooks"][0]["args"]
    assert args[args.index("--ldconfig-path") + 1] == "@/usr/sbin/ldconfig.real"


@pytest.mark.parametrize("args, line", [
    (["--mode", "gds"], "mode gds cannot apply here: it describes GPUDirect Storage nodes (/dev/nvidia-fs*); this "
                        "toolkit describes the GPUs and MIG devices NVML reports (--mode auto or nvml) (--mode)"),
    (["--mode", "wsl"], "mode wsl cannot apply here: it describes WSL2's GPUs, reached through /dev/dxg and the "
                        "Windows driver store; this toolkit describes the GPUs and MIG devices NVML reports "
                        "(--mode auto or nvml) (--mode)"),
    (["--ldconfig-path", "sbin/ldconfig"], "the ldconfig path must be absolute, not 'sbin/ldconfig' (the host's "
                                           "ldconfig runs: an image's own is never run) (--ldconfig-path)"),
])
def test_modes_that_cannot_apply_here_say_why(sim_host, tmp_path, args, line):
    out = tmp_path / "nvidia.yaml"
    result = generate("--driver-root", str(sim_host), "--output", str(out), *args, check=False)
    assert (result.returncode, result.stderr) == (1, f"nvidia-ctk: error: {line}\n") and not out.exists()


# ctk.fast_path leaves `--output -` to click
@pytest.mark.parametrize("more", [[], ["--output", "-"]], ids=["fast-path", "click"])
def test_a_closed_stdout_is_one_line(sim_host, more):
    # `>&-`: fd 1 closed at start, so Python's sys.stdout is None (DEVNULL would be an open fd)
    result = subprocess.run(["sh", "-c", '"$@" >&-', "sh", NVIDIA_CTK, "cdi", "generate",
                             "--driver-root", str(sim_host), *more], stderr=subprocess.PIPE, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == "nvidia-ctk: error: cannot write the spec: stdout is closed (stdout)\n"


def test_dev_root_is_where_the_device_nodes_are_read(sim_host, tmp_path):
    """--dev-root (NVIDIA's flag): the nodes of a driver whose dev/ is elsewhere, here a copy of the
    simulated host's nodes (same type, major and minor) under another folder."""
    dev_root = tmp_path / "devroot"
    for node in (sim_host / "dev").rglob("*"):
        st = node.lstat()
        target = dev_root / "dev" / node.relative_to(sim_host / "dev")
        if stat.S_ISDIR(st.st_mode):
            target.mkdir(parents=True, exist_ok=True)
        elif stat.S_ISCHR(st.st_mode):
            target.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(target, stat.S_IFCHR | 0o666, st.st_rdev)
    document = spec_of(sim_host, "--dev-root", str(dev_root))
    nodes = [n for d in document["devices"] for n in d["containerEdits"]["deviceNodes"]]
    nodes += document["containerEdits"]["deviceNodes"]
    assert nodes and all(n["hostPath"] == f"{dev_root}{n['path']}" for n in nodes), nodes
    result = generate("--driver-root", str(sim_host), "--dev-root", str(tmp_path / "none"), check=False)
    assert (result.returncode, result.stderr) == (1, "nvidia-ctk: error: the dev root has no dev/ folder: give the "
                                                     f"folder holding the driver's dev/ ({tmp_path / 'none'})\n")


def test_nvidias_hook_path_discovery_mode_and_library_search_path_spellings(sim_host):
    """Issue 27.2: --nvidia-ctk-path is NVIDIA's older name of --nvidia-cdi-hook-path, --discovery-mode of
    --mode; --library-search-path (a folder inside the driver root) finds nothing more on this host."""
    document = spec_of(sim_host, "--nvidia-ctk-path", "/opt/gct/bin/nvidia-cdi-hook", "--discovery-mode", "nvml",
                       "--library-search-path", "/opt/none", "--library-search-path=/usr/lib")
    assert document["containerEdits"]["hooks"][0]["path"] == "/opt/gct/bin/nvidia-cdi-hook"
    assert document == spec_of(sim_host, "--nvidia-cdi-hook-path=/opt/gct/bin/nvidia-cdi-hook")


@pytest.mark.parametrize("args, line", [
    (["--csv.file", "/etc/nvidia-container-runtime/host-files-for-container.d/devices.csv"],
     "--csv.file is for mode csv, which describes the driver files of Tegra (Jetson) boards, listed in CSV files; "
     "this toolkit describes the GPUs and MIG devices NVML reports: leave it out (--csv.file)"),
    (["--csv.ignore-pattern", "*.so"],
     "--csv.ignore-pattern is for mode csv, which describes the driver files of Tegra (Jetson) boards, listed in "
     "CSV files; this toolkit describes the GPUs and MIG devices NVML reports: leave it out (--csv.ignore-pattern)"),
    (["--config-search-path", "/usr/share"], "--config-search-path is for mode management, which describes every "
     "driver node and tool, for management containers without a GPU; this toolkit describes the GPUs and MIG devices "
     "NVML reports: leave it out (--config-search-path)"),
    (["--library-search-path", "lib"], "a library search path is a folder inside the driver root and must be "
                                       "absolute, not 'lib' (--library-search-path)"),
])
def test_csv_flags_and_a_relative_library_search_path_are_one_line(sim_host, tmp_path, args, line):
    out = tmp_path / "nvidia.yaml"
    result = generate("--driver-root", str(sim_host), "--output", str(out), *args, check=False)
    assert (result.returncode, result.stderr) == (1, f"nvidia-ctk: error: {line}\n") and not out.exists()


def transform(*args, stdin=None):
    return subprocess.run([NVIDIA_CTK, "cdi", "transform", "root", *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


def test_transform_root_moves_a_generated_specs_host_paths(sim_host, tmp_path):
    """Issue 27.2: `nvidia-ctk cdi transform root` (NVIDIA's): the simulated host's spec made right for a
    host where its driver root is at /host; the hook's container paths stay."""
    spec_file = tmp_path / "in.json"
    generate("--driver-root", str(sim_host), "--output", str(spec_file))
    before = json.loads(spec_file.read_text())
    out = tmp_path / "out" / "moved.json"
    result = transform("--from", str(sim_host), "--to", "/host", "--input", str(spec_file), "--output", str(out))
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "")
    after = json.loads(out.read_text())
    assert validate_document(after, "moved") == []
    node = after["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {**before["devices"][0]["containerEdits"]["deviceNodes"][0], "hostPath": "/host/dev/nvidia0"}
    mounts = after["containerEdits"]["mounts"]
    assert mounts and all(m["hostPath"].startswith("/host/") and not m["hostPath"].startswith(str(sim_host))
                          for m in mounts)
    assert [m["containerPath"] for m in mounts] == [m["containerPath"] for m in before["containerEdits"]["mounts"]]
    (hook,) = after["containerEdits"]["hooks"]
    old_args = before["containerEdits"]["hooks"][0]["args"]
    assert [a for a in hook["args"] if a.startswith("--params-file") or a.startswith("/host")] and \
        [a for a, b in zip(hook["args"], old_args) if a != b] == [a for a in hook["args"] if a.startswith("/host")]
    # stdin to stdout (YAML), and --relative-to container moves containerPath
    result = transform("--from", "/usr/lib", "--to", "/opt/lib", "--relative-to", "container",
                       stdin=spec_file.read_text())
    assert result.returncode == 0, result.stderr
    moved = yaml.safe_load(result.stdout)["containerEdits"]["mounts"]
    assert any(m["containerPath"].startswith("/opt/lib/") for m in moved)
    assert [m["hostPath"] for m in moved] == [m["hostPath"] for m in before["containerEdits"]["mounts"]]


@pytest.mark.parametrize("args, stdin, line", [
    (["--from", "/a", "--to", "b"], "", "the root must be an absolute path, not 'b' (--to)"),
    (["--from", "/a", "--to", "/b", "--input", "/nonexistent.yaml"], None,
     "cannot read the spec: No such file or directory (/nonexistent.yaml)"),
    (["--from", "/a", "--to", "/b"], '{"cdiVersion": "0.5.0"}', "invalid CDI spec: "),
])
def test_transform_root_bad_input_is_one_line(args, stdin, line):
    result = transform(*args, stdin=stdin)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith(f"nvidia-ctk: error: {line}") and result.stderr.count("\n") == 1, result.stderr


def test_disable_and_enable_hook_as_nvidias_tool(sim_host):
    """NVIDIA's --disable-hook/--enable-hook (and their plural aliases), --device-ids/--device: subcommands
    left out of our one hook entry, 'all' leaves no entry; update-ldcache disabled takes enable-cuda-compat
    with it (it orders the cache update-ldcache builds)."""
    def subcommands(*args):
        hooks = spec_of(sim_host, *args)["containerEdits"].get("hooks", [])
        assert len(hooks) <= 1
        return [a for a in hooks[0]["args"] if not a.startswith(("-", "/", "@")) and "::" not in a
                and not a[0].isdigit()] if hooks else None

    assert subcommands() == ["nvidia-cdi-hook", "create-symlinks", "enable-cuda-compat", "update-ldcache",
                             "disable-device-node-modification", "update-application-profile"]
    assert subcommands("--disable-hook", "update-application-profile", "--disable-hooks=update-ldcache") == \
        ["nvidia-cdi-hook", "create-symlinks", "disable-device-node-modification"]
    assert subcommands("--disable-hook", "all") is None
    assert subcommands("--disable-hook", "update-application-profile", "--enable-hook",
                       "update-application-profile") == subcommands()
    assert names(spec_of(sim_host, "--device-ids", "0", "--device=1:0", "--no-all-device")) == \
        names(spec_of(sim_host, "--device-id", "0", "--device-id", "1:0", "--no-all-device"))
    result = generate("--driver-root", str(sim_host), "--disable-hook", "chmod")
    assert result.stderr.startswith("nvidia-ctk: WARNING: --disable-hook chmod: this toolkit writes no such hook")


@pytest.mark.parametrize("args, line", [
    (["--enable-hook", "all"], "enabling all hooks is not supported: name each one (--enable-hook)"),
    (["--enable-hooks", "chmod"], "this toolkit writes no hook 'chmod' (its hooks: create-symlinks, enable-cuda-compat, "
                                  "update-ldcache, disable-device-node-modification, update-application-profile) "
                                  "(--enable-hook)"),
])
def test_enabling_what_cannot_be_enabled_is_one_line(sim_host, args, line):
    result = generate("--driver-root", str(sim_host), *args, check=False)
    assert (result.returncode, result.stderr, result.stdout) == (1, f"nvidia-ctk: error: {line}\n", "")
