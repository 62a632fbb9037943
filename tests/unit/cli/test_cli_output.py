"""`nvidia-container-cli info`, `info --csv` and `list`: exact output on simulated hosts.

Each run is its own process (one NVML per process, docs/reference.md#nvml), started like the real program would
be; the expected text is written out here from what the simulator was told to build."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from simulator import driver_files as simulated
from simulator.host_builder import create_simulated_host
from simulator.models import DEFAULT_MODEL

V = "550.54.15"


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NVIDIA_")}
    return subprocess.run([sys.executable, "-m", "hook.cli", *args], capture_output=True, text=True,
                          env={**environ, **(env or {})}, timeout=60)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-container-cli: error: "), done.stderr
    return lines[0]


def marker(root: str) -> dict:
    with open(os.path.join(root, ".nvidia-simulated-host.json")) as f:
        return json.load(f)["inventory"]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Two A100s, GPU 1 in MIG mode with two 1g.5gb devices, two IMEX channels."""
    if os.geteuid() != 0:
        pytest.skip("a simulated host has device nodes made with mknod: needs root")
    root = str(tmp_path_factory.mktemp("cli") / "host")
    create_simulated_host(root, gpus=2, model=DEFAULT_MODEL, driver_version=V, cuda_version="12.4",
                          mig_options=["1=1g.5gb,1g.5gb"], imex_channels=2)
    return root


@pytest.fixture(scope="module")
def t4_host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a simulated host has device nodes made with mknod: needs root")
    root = str(tmp_path_factory.mktemp("cli-t4") / "host")
    create_simulated_host(root, gpus=1, model="Tesla T4", driver_version="535.161.08", cuda_version="12.2")
    return root


def test_info_exact(host):
    gpus = marker(host)["gpus"]
    expected = ["NVRM version:   550.54.15", "CUDA version:   12.4"]
    for gpu in gpus:
        expected += ["",
                     f"Device Index:   {gpu['index']}",
                     f"Device Minor:   {gpu['minor']}",
                     "Model:          NVIDIA A100-SXM4-40GB",
                     "Brand:          Nvidia",
                     f"GPU UUID:       {gpu['uuid']}",
                     f"Bus Location:   {gpu['pci_bus_id']}",
                     "Architecture:   8.0"]
    assert ok(cli("--root", host, "info")) == "\n".join(expected) + "\n"


def test_info_csv_exact(host):
    rows = [f"{g['index']},{g['minor']},NVIDIA A100-SXM4-40GB,Nvidia,{g['uuid']},{g['pci_bus_id']},8.0"
            for g in marker(host)["gpus"]]
    expected = ["NVRM version,CUDA version", "550.54.15,12.4", "",
                "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture", *rows]
    assert ok(cli("--root", host, "info", "--csv")) == "\n".join(expected) + "\n"


def test_info_other_model_brand_and_architecture(t4_host):
    out = ok(cli("--root", t4_host, "info")).splitlines()
    assert out[:2] == ["NVRM version:   535.161.08", "CUDA version:   12.2"]
    assert "Model:          Tesla T4" in out and "Brand:          Tesla" in out
    assert out[-1] == "Architecture:   7.5"


def test_driver_root_from_environment_and_from_config(host, tmp_path):
    by_env = ok(cli("info", env={"NVIDIA_CTK_DRIVER_ROOT": host}))
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{host}"\n')
    by_config = ok(cli("info", "--csv", env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}))
    assert by_env.startswith("NVRM version:   550.54.15\n")
    assert by_config.splitlines()[1] == "550.54.15,12.4"


def expected_files(host: str, compat32: bool = False) -> dict[str, list[str]]:
    """Per section, the host paths the simulator installed (libraries sorted by path, as listed)."""
    lib64, lib32 = f"{host}/{simulated.LIB64_DIR}", f"{host}/{simulated.LIB32_DIR}"
    libs = sorted(f"{lib64}/{lib.file_name(V)}" for lib in simulated.LIBRARIES)
    libs32 = sorted(f"{lib32}/{lib.file_name(V)}" for lib in simulated.LIBRARIES
                    if lib.has_32bit and os.path.isdir(lib32)) if compat32 else []
    # compute's binaries, then utility's (capabilities in name order)
    binaries = [f"{host}/usr/bin/{name}" for name in
                ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-smi", "nvidia-debugdump",
                 "nvidia-persistenced")]
    return {"binaries": binaries, "libraries": libs, "libraries32": libs32,
            "ipcs": [f"{host}/run/nvidia-persistenced/socket"],
            "firmware": [f"{host}/lib/firmware/nvidia/{V}/gsp_ga10x.bin", f"{host}/lib/firmware/nvidia/{V}/gsp_tu10x.bin"]}


def mig_lines(host: str, gpu_minor: int, mig: dict) -> list[str]:
    base = f"{host}/proc/driver/nvidia/capabilities/gpu{gpu_minor}/mig/gi{mig['gi']}"
    return [f"{base}/access", f"{host}/dev/nvidia-caps/nvidia-cap{mig['gi_cap_minor']}",
            f"{base}/ci{mig['ci']}/access", f"{host}/dev/nvidia-caps/nvidia-cap{mig['ci_cap_minor']}"]


CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def test_list_everything_in_order(host):
    gpus = marker(host)["gpus"]
    files = expected_files(host)
    expected = [f"{host}/dev/{n}" for n in CONTROL]
    expected += [f"{host}/dev/nvidia0", f"{host}/dev/nvidia1"]
    for mig in gpus[1]["mig_devices"]:
        expected += mig_lines(host, gpus[1]["minor"], mig)
    expected += [f"{host}/dev/nvidia-caps-imex-channels/channel0", f"{host}/dev/nvidia-caps-imex-channels/channel1"]
    expected += files["binaries"] + files["libraries"] + files["ipcs"] + files["firmware"]
    assert ok(cli("--root", host, "list")).splitlines() == expected


def test_list_compat32_adds_32bit_libraries_after_the_64bit_ones(host):
    files = expected_files(host, compat32=True)
    if not files["libraries32"]:
        pytest.skip("gcc here cannot build -m32: the simulated host has no 32-bit libraries")
    out = ok(cli("--root", host, "list", "--compat32")).splitlines()
    start = out.index(files["libraries"][0])
    assert out[start:start + len(files["libraries"]) + len(files["libraries32"])] == \
        files["libraries"] + files["libraries32"]
    assert ok(cli("--root", host, "list", "--libraries", "--compat32")).splitlines() == \
        files["libraries"] + files["libraries32"]


def test_the_launcher_passes_the_mps_pipe_directory_on(host):
    """CUDA_MPS_PIPE_DIRECTORY names the MPS directory listed (and mounted) for compute, through the
    installed launcher as the engines and LXC start it (issue 22, item 9)."""
    mps = os.path.join(host, "srv", "mps")
    os.makedirs(mps)
    try:
        env = {"PATH": "/usr/bin:/bin", "CUDA_MPS_PIPE_DIRECTORY": "/srv/mps"}
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nvidia-container-cli"), "--root", host,
                               "list", "--ipcs"], capture_output=True, text=True, env=env, timeout=60)
        assert ok(done).splitlines() == expected_files(host)["ipcs"] + [mps]
        del env["CUDA_MPS_PIPE_DIRECTORY"]   # the default, /tmp/nvidia-mps, is not there
        assert ok(subprocess.run(done.args, capture_output=True, text=True, env=env, timeout=60)).splitlines() == \
            expected_files(host)["ipcs"]
    finally:
        os.rmdir(mps)
        os.rmdir(os.path.dirname(mps))


def test_list_sections(host):
    files = expected_files(host)
    assert ok(cli("--root", host, "list", "-l")).splitlines() == files["libraries"]
    assert ok(cli("--root", host, "list", "-b", "-f")).splitlines() == files["binaries"] + files["firmware"]
    assert ok(cli("--root", host, "list", "--ipcs")).splitlines() == files["ipcs"]


def test_list_selected_devices(host):
    gpus = marker(host)["gpus"]
    control = [f"{host}/dev/{n}" for n in CONTROL]
    assert ok(cli("--root", host, "list", "--device=0")).splitlines() == control + [f"{host}/dev/nvidia0"]
    mig = gpus[1]["mig_devices"][1]
    by_uuid = ok(cli("--root", host, "list", f"--device={mig['uuid']}")).splitlines()
    assert by_uuid == control + [f"{host}/dev/nvidia1"] + mig_lines(host, 1, mig)
    assert ok(cli("--root", host, "list", "-d", "1:1")).splitlines() == by_uuid
    with_libs = ok(cli("--root", host, "list", "-d", "0", "-l")).splitlines()
    assert with_libs == control + [f"{host}/dev/nvidia0"] + expected_files(host)["libraries"]


def test_list_mig_config_monitor_and_imex(host):
    control = [f"{host}/dev/{n}" for n in CONTROL]
    caps = f"{host}/proc/driver/nvidia/capabilities/mig"
    out = ok(cli("--root", host, "list", "--mig-config=1", "--mig-monitor=1")).splitlines()
    assert out == control + [f"{caps}/config", f"{host}/dev/nvidia-caps/nvidia-cap1",
                             f"{caps}/monitor", f"{host}/dev/nvidia-caps/nvidia-cap2"]
    out = ok(cli("--root", host, "list", "--imex-channel=1")).splitlines()
    assert out == control + [f"{host}/dev/nvidia-caps-imex-channels/channel1"]


@pytest.mark.parametrize("args, fragments", [
    (["list", "--device=7"], ["unknown device id '7'", "(--device)"]),
    (["list", "--device=GPU-12/../x"], ["malformed device id", "(--device)"]),
    (["list", "--imex-channel=5"], ["IMEX channel 5 is missing", "channel5)"]),
    (["list", "--imex-channel=abc"], ["invalid IMEX channel 'abc'"]),
    (["list", "--mig-config=4"], ["unknown device id '4'", "(--mig-config)"]),
])
def test_list_errors_are_one_line(host, args, fragments):
    line = one_line_error(cli("--root", host, *args))
    for fragment in fragments:
        assert fragment in line


def test_no_driver_and_bad_root_are_one_line(tmp_path):
    line = one_line_error(cli("--root", str(tmp_path / "missing"), "info"))
    assert "cannot use driver root" in line and "from --root" in line
    line = one_line_error(cli("--root", str(tmp_path), "list"))
    assert "no NVIDIA driver" in line
    config = tmp_path / "config.toml"
    config.write_text("[nvidia-container-cli\n")
    line = one_line_error(cli("info", env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}))
    assert "invalid TOML" in line and str(config) in line


def test_ldcache_option_and_directory_scan_give_the_same_libraries(host):
    # --ldcache names the driver root's cache; a root without one is scanned (same files, same order)
    by_cache = ok(cli("--root", host, "--ldcache", "/etc/ld.so.cache", "list", "-l"))
    by_scan = ok(cli("--root", host, "--ldcache", "/etc/no-such-cache", "list", "-l"))
    assert by_cache == by_scan == "\n".join(expected_files(host)["libraries"]) + "\n"


def test_installed_launcher_and_a_closed_pipe(host):
    launcher = os.path.join(os.path.dirname(sys.executable), "nvidia-container-cli")
    if not os.path.exists(launcher):
        pytest.skip("launcher not installed: run `make venv`")
    # the launcher keeps NVIDIA_* variables: the driver root arrives by environment
    done = subprocess.run([launcher, "info", "--csv"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "NVIDIA_CTK_DRIVER_ROOT": host, "PYTHONPATH": "/nonexistent"})
    assert done.returncode == 0 and done.stdout.splitlines()[1] == "550.54.15,12.4", done.stderr
    # a reader that is gone before the output is written (`list | true`: true exits while Python starts)
    piped = subprocess.run(f"{launcher} --root {host} list | true; echo done", shell=True, capture_output=True,
                           text=True, timeout=60)
    assert piped.stdout == "done\n" and piped.stderr == ""
