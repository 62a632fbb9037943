"""Real engines with the shim as their runtime, on a simulated GPU host: Docker 20.10 (runtime `nvidia`
in a private dockerd's daemon.json), containerd 1.6 (`ctr run --runc-binary`) and podman 4.3
(`podman --runtime`). The shim's config and cache dir reach it through the engine's environment."""
from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from runtime_shim import runtime_cache
from tests.e2e.engines import docker, short_tempdir
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.rootfs import make_rootfs, rootfs_tar
from tests.e2e.shim_host import GPU_REPORT, SHIM, build_gpu_host, parse_gpu_report, write_shim_config

pytestmark = pytest.mark.e2e
MODEL = "NVIDIA A100-SXM4-40GB"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is not installed (make venv)")
    ensure_hugetlb_on_v1()
    work = tmp_path_factory.mktemp("shim-engines")
    host = build_gpu_host(work)
    config = write_shim_config(work / "config.toml", host, runtime="runc", mode="cdi", debug_log=work / "shim.log")
    rootfs = make_rootfs(work / "image-root", glibc=True)
    env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_CACHE_DIR": str(work / "cache")}
    return {"host": host, "env": env, "rootfs": rootfs, "tar": rootfs_tar(rootfs, work / "image.tar"), "work": work}


@pytest.fixture
def workdir():
    path = short_tempdir("gct-shim-")
    yield path
    subprocess.run(["rm", "-rf", str(path)])


def gpu_line(host, index: int) -> str:
    return f"GPU 0: {MODEL} (UUID: {host.gpu_uuids[index]})"


# -- Docker 20.10 ---------------------------------------------------------------------------------

def test_docker_runs_gpu_containers_through_the_shim(setup, workdir, private_dockerd):
    daemon_json = workdir / "daemon.json"
    daemon_json.write_text(json.dumps({"runtimes": {"nvidia": {"path": str(SHIM)}}, "storage-driver": "vfs"}))
    # dockerd looks for nvidia-container-runtime-hook in its PATH once, at start, for --gpus
    env = {**setup["env"], "PATH": f"{SHIM.parent}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
    daemon = private_dockerd(daemon_json, env=env)
    docker(daemon, "import", str(setup["tar"]), "gct-glibc:latest")
    run = ["run", "--rm", "--network", "none", "--runtime=nvidia"]

    asked = docker(daemon, *run, "-e", "NVIDIA_VISIBLE_DEVICES=0", "gct-glibc:latest", "sh", "-c", GPU_REPORT)
    seen = parse_gpu_report(asked.stdout)
    assert seen["smi"] == [gpu_line(setup["host"], 0)]
    assert "nvidia0" in seen["dev"] and "nvidia1" not in seen["dev"]
    assert "libcuda.so.1" in seen["libs"]

    # without a request the shim is invisible: the same as runc itself
    plain = docker(daemon, *run, "gct-glibc:latest", "sh", "-c", GPU_REPORT).stdout
    with_runc = docker(daemon, "run", "--rm", "--network", "none", "--runtime=runc", "gct-glibc:latest",
                       "sh", "-c", GPU_REPORT).stdout
    assert plain == with_runc
    assert parse_gpu_report(plain) == {"dev": [], "libs": [], "smi": ["NO-NVIDIA-SMI"]}

    # --gpus: docker sets NVIDIA_VISIBLE_DEVICES and adds the legacy prestart hook; in cdi mode the shim
    # injects through the spec and drops that hook, so nothing is injected twice. GPU 1 is in MIG mode, so
    # the spec has its MIG devices, not the whole GPU (as NVIDIA's specs)
    gpus = docker(daemon, *run, "--gpus", '"device=1:0"', "gct-glibc:latest", "sh", "-c", GPU_REPORT)
    mig = setup["host"].mig_uuids["1:0"]
    assert parse_gpu_report(gpus.stdout)["smi"] == [gpu_line(setup["host"], 1),
                                                    f"  MIG 1g.5gb      Device  0: (UUID: {mig})"]
    assert "removed the nvidia-container-runtime-hook prestart hook" in (setup["work"] / "shim.log").read_text()

    # an unknown GPU: our one line reaches docker's output through runc's log file
    failed = docker(daemon, *run, "-e", "NVIDIA_VISIBLE_DEVICES=7", "gct-glibc:latest", "true", check=False)
    assert failed.returncode != 0
    assert ("nvidia-container-runtime: error: unresolvable CDI device nvidia.com/gpu=7: no such device in the specs "
            "(nvidia-ctk cdi list shows them; regenerate after a GPU change) "
            f"(spec dirs {setup['host'].spec_dir})") in failed.stderr


def test_docker_a_config_warning_stays_out_of_the_containers_output(setup, workdir, private_dockerd):
    """Under docker the shim's stderr during create is the container's own stdio: a config warning (an
    unknown key) printed there showed in `docker run`'s output and `docker logs`, without a program name
    (issue 14.11). It belongs in the shim's debug log and runc's log."""
    config = workdir / "warn.toml"
    debug_log = workdir / "shim-warn.log"
    write_shim_config(config, setup["host"], runtime="runc", mode="cdi", debug_log=debug_log)
    config.write_text(config.read_text().replace("[nvidia-container-runtime]\n",
                                                 "[nvidia-container-runtime]\nno-such-key = true\n"))
    daemon_json = workdir / "daemon.json"
    daemon_json.write_text(json.dumps({"runtimes": {"nvidia": {"path": str(SHIM)}}, "storage-driver": "vfs"}))
    daemon = private_dockerd(daemon_json, env={**setup["env"], "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
    docker(daemon, "import", str(setup["tar"]), "gct-glibc:latest")
    name = f"gct-warn-{uuid.uuid4().hex[:8]}"
    ran = docker(daemon, "run", "--name", name, "--network", "none", "--runtime=nvidia",
                 "-e", "NVIDIA_VISIBLE_DEVICES=0", "gct-glibc:latest", "sh", "-c", "echo out; echo err >&2")
    assert ran.stdout == "out\n" and ran.stderr == "err\n"
    logs = docker(daemon, "logs", name)
    assert (logs.stdout, logs.stderr) == ("out\n", "err\n")
    docker(daemon, "rm", name)
    assert (f'level=warning msg="nvidia-container-runtime: unknown config key nvidia-container-runtime.no-such-key '
            f'ignored ({config})"') in debug_log.read_text()


# -- containerd 1.6: ctr run --runc-binary ------------------------------------------------------------

def containerd_config(workdir):
    root, state, opt = workdir / "root", workdir / "state", workdir / "opt"
    socket = workdir / "containerd.sock"
    text = (f'version = 2\nroot = "{root}"\nstate = "{state}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{socket}"\n'
            f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{opt}"\n')
    config = workdir / "containerd.toml"
    config.write_text(text)
    return config, socket, [root, state, opt]


def test_ctr_run_with_the_shim_as_runc_binary(setup, workdir, ctr_namespace, private_containerd):
    config, socket, dirs = containerd_config(workdir)
    daemon = private_containerd(config, socket, dirs, env=setup["env"])

    def ctr_run(*env: str) -> subprocess.CompletedProcess:
        rootfs = make_rootfs(workdir / f"rootfs-{uuid.uuid4().hex[:6]}", glibc=True)
        args = [*daemon.enter(["ctr"]), "--address", str(daemon.socket), "--namespace", ctr_namespace, "run", "--rm",
                "--runc-binary", str(SHIM)]
        for e in ("PATH=/usr/bin:/bin:/usr/sbin:/sbin", *env):  # no image config: no PATH otherwise
            args += ["--env", e]
        args += ["--rootfs", str(rootfs), "gct-" + uuid.uuid4().hex[:8], "sh", "-c", GPU_REPORT]
        return subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    asked = ctr_run("NVIDIA_VISIBLE_DEVICES=1:1")  # GPU 1 is in MIG mode: its MIG devices are in the spec
    assert asked.returncode == 0, asked.stderr + daemon.log_tail()
    mig = setup["host"].mig_uuids["1:1"]
    assert parse_gpu_report(asked.stdout)["smi"] == [gpu_line(setup["host"], 1),
                                                     f"  MIG 1g.5gb      Device  0: (UUID: {mig})"]
    plain = ctr_run()
    assert plain.returncode == 0, plain.stderr
    assert parse_gpu_report(plain.stdout)["dev"] == []


# -- podman 4.3: --runtime ---------------------------------------------------------------------------

def test_podman_with_the_shim_as_runtime(setup, workdir, private_podman):
    podman = private_podman(workdir / "hooks.d")
    (workdir / "hooks.d").mkdir()
    env = {**podman.env, **setup["env"]}
    # podman gives conmon (and so the runtime) a fixed environment plus containers.conf's conmon_env_vars
    conf = podman.workdir / "containers.conf"
    conf.write_text(conf.read_text().replace(
        "[engine]\n", "[engine]\nconmon_env_vars = " + json.dumps([f"{k}={v}" for k, v in setup["env"].items()]) + "\n"))

    def podman_cmd(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = podman.argv(*args)
        argv[argv.index("--runtime") + 1] = str(SHIM)
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    podman_cmd("import", str(setup["tar"]), "gct-glibc:latest")
    run = ["run", "--rm", "--network", "none"]
    mig = setup["host"].mig_uuids["1:0"]
    asked = podman_cmd(*run, "-e", f"NVIDIA_VISIBLE_DEVICES={mig}", "gct-glibc:latest", "sh", "-c", GPU_REPORT)
    seen = parse_gpu_report(asked.stdout)
    assert seen["smi"] == [gpu_line(setup["host"], 1), f"  MIG 1g.5gb      Device  0: (UUID: {mig})"]
    plain = podman_cmd(*run, "gct-glibc:latest", "sh", "-c", GPU_REPORT)
    assert parse_gpu_report(plain.stdout)["dev"] == []
    failed = podman_cmd(*run, "-e", "NVIDIA_VISIBLE_DEVICES=7", "gct-glibc:latest", "true", check=False)
    assert failed.returncode != 0
    assert "unresolvable CDI device nvidia.com/gpu=7" in failed.stderr
    # podman calls the runtime's `start` with an environment of XDG_RUNTIME_DIR alone, so the shim there
    # reads the default config and keeps its runtime cache in the default dir, as on a real host: in
    # podman's own /run (PrivatePodman), not the machine's
    default_cache = runtime_cache.cache_file({})
    assert (podman.run_dir / os.path.relpath(default_cache, "/run")).is_file(), default_cache
