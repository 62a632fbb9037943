"""Property-based fuzzing of every parser that reads outside input (issue 15): runc's argv, the OCI
state, config.json, the container's env values and annotations, CDI specs in JSON and YAML,
config.toml, ld.so.cache and the driver's mig-minors. Each gets profile.fuzz_cases inputs (10,000 in the
full profile); any exception other than the project's one-line errors, or a call slower than the
per-call timeout, fails the test with the input found (tests.reliability.fuzzing).

Each target drives the parser the way the programs do, through to what they do with the result
(the shim's config.json rewrite, the hook's device selection, the registry's edits), so a bad value
that a parser lets through and a later step trips on is found too."""
from __future__ import annotations

import io
import json
import os
import subprocess

import pytest

from cdi import json_codec
from cdi.config import Config, load_config, parse_config
from cdi.inventory import Gpu, Inventory, MigDevice
from cdi.ldcache import parse_ld_cache
from cdi.nvml import read_mig_control_minors, read_mig_minors
from cdi.registry import Registry
from cdi.request import resolve_device_request
from cdi.selection import select_and_check
from cdi.spec_cache import ValidatedSpecCache
from cdi.spec_file import check_spec_file
from runtime_shim import bundle_spec, runtime_cache
from runtime_shim.errors import runc_log_line
from runtime_shim.main import modify_bundle
from runtime_shim.runc_argv import parse_runc_argv
from tests.reliability import strategies
from tests.reliability.fuzzing import fuzz
# nvidia-cdi-hook's C readers of the state and config.json, built with the sanitizers where the compiler
# has them, and what Python's reading of the same document gives (the probe and its rule live with the
# reader's own tests)
from tests.unit.cdi_hook.test_json_reader import probe, python_outcome, python_process  # noqa: F401 (probe: a fixture)

# a spec the registry accepts, for the targets that look devices up
SPEC = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": name, "containerEdits": {"deviceNodes": [{"path": "/dev/null"}]}}
                    for name in ("0", "1", "1:0", "GPU-00000000-0000-0000-0000-000000000000", "all")],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                           "mounts": [{"hostPath": "/usr/lib", "containerPath": "/usr/lib/x", "options": ["ro", "bind"]}],
                           "hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true"],
                                      "env": ["PATH=/bin"]}]}}
MIG = MigDevice(parent_index=1, index=0, uuid="MIG-00000000-0000-0000-0000-000000000001", gi=1, ci=0,
                profile="1g.5gb", gi_cap_minor=12, ci_cap_minor=13)
INVENTORY = Inventory(driver_version="550.54.15", cuda_version="12.4", gpus=(
    Gpu(index=0, minor=0, uuid="GPU-00000000-0000-0000-0000-000000000000", name="NVIDIA A100-SXM4-40GB",
        brand="Nvidia", pci_bus_id="00000000:07:00.0", architecture="Ampere", compute_capability="8.0"),
    Gpu(index=1, minor=1, uuid="GPU-00000000-0000-0000-0000-000000000002", name="NVIDIA A100-SXM4-40GB",
        brand="Nvidia", pci_bus_id="00000000:0F:00.0", architecture="Ampere", compute_capability="8.0",
        mig_enabled=True, mig_devices=(MIG,))))
CONFIGS = [Config(), parse_config('swarm-resource = "DOCKER_RESOURCE_GPU"\n'
                                  "accept-nvidia-visible-devices-as-volume-mounts = true\n", "fuzz.toml"),
           parse_config("accept-nvidia-visible-devices-envvar-when-unprivileged = false\ndisable-require = true\n",
                        "fuzz.toml")]


@pytest.fixture
def spec_dir(tmp_path):
    directory = tmp_path / "cdi"
    directory.mkdir()
    (directory / "nvidia.json").write_text(json.dumps(SPEC))
    return directory


@pytest.fixture
def registry(spec_dir):
    return Registry((str(spec_dir),), cache=ValidatedSpecCache(None))


def use_request(oci: dict, config: Config, registry: Registry | None = None) -> None:
    """What the shim and the hook do with a container's request: resolve it, map it onto the GPUs, and
    (with a registry) build and apply its CDI edits."""
    request = resolve_device_request(oci, config)
    if not request.is_gpu_container:
        return True
    select_and_check(request, INVENTORY)
    names = request.cdi_device_names(config.cdi.default_kind)
    if registry is not None and names:
        from cdi.apply import apply_edits

        json_codec.dumps_compact(apply_edits(oci, registry.edits_for(names)))
    return True


def test_runc_argv(profile, figures):
    def target(args):
        command = parse_runc_argv(args)
        if command.modify:
            command.bundle_dir("/cwd")
        runc_log_line("x", "error", command.log_format)
        return not command.error

    fuzz(target, strategies.runc_argv, profile, figures)


def test_runc_argv_in_the_launcher(profile, figures, tmp_path):
    """The static launcher's own reading of argv (C, on every runc call the engine makes): it must
    start Python for exactly the command lines whose command the Python parser says is create or run,
    pass every other one to the runtime as it is, and never crash. No bundle exists, so a create is
    never settled by the launcher's scan of config.json."""
    from tests.unit.runtime_shim.shim_env import install_shim, make_shim_env

    (tmp_path / "bin").mkdir()
    install_shim(tmp_path / "bin")
    shim = make_shim_env(tmp_path, tmp_path / "bin")
    shim.write_config(runtimes=["/bin/true"])
    assert shim.run("state", "warm-up").returncode == 0   # Python writes the launcher's cache
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def target(args):
        shim.reset()
        # bytes, not text: an argv that is not UTF-8 reaches the debug log as it is
        result = subprocess.run([str(shim.shim), *args], env=shim.env(), cwd=cwd, capture_output=True,
                                stdin=subprocess.DEVNULL, timeout=60)
        log = shim.debug_log.read_bytes() if shim.debug_log.exists() else b""
        python_ran = b"low-level runtime" in log   # what the Python side logs for every call it handles
        assert result.returncode >= 0, f"the launcher died of signal {-result.returncode}"
        assert python_ran == (parse_runc_argv(args).command in ("create", "run")), (args, log)
        return not python_ran

    # an argv from the kernel holds no NUL
    fuzz(target, strategies.runc_argv.map(lambda args: [a.replace("\0", "") for a in args]), profile, figures)


def test_config_json_in_the_launcher(profile, figures, tmp_path, spec_dir, monkeypatch):
    """The launcher's own reading and editing of config.json (C, create_fastpath.c: a GPU container's
    create from the create cache). The request {NVIDIA_VISIBLE_DEVICES=1} is cached first; then every
    case runs through launchers whose interpreter is /bin/false, so a create the launcher leaves to
    Python exits 1 with config.json untouched byte for byte, and one it edits execs the runtime
    (/bin/true) and must have written what Python's rewrite gives for the same bytes. Half the cases
    keep the cached request's members and vary the rest (so the edits are applied), half are any
    config.json; the launcher must never crash."""
    from launcher import install_launchers
    from tests.unit.runtime_shim.shim_env import install_shim, make_shim_env

    bindir = tmp_path / "bin"
    bindir.mkdir()
    install_shim(bindir)
    shim = make_shim_env(tmp_path, bindir)
    shim.write_config(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{spec_dir}"]\n', runtimes=["/bin/true"])
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    cached = {"ociVersion": "1.0.2", "process": {"env": ["NVIDIA_VISIBLE_DEVICES=1"], "user": {"uid": 0, "gid": 0}},
              "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(cached))
    argv = ["--root", str(tmp_path / "state"), "create", "--bundle", str(bundle), "fuzz"]
    assert shim.run(*argv).returncode == 0 and list(shim.cache_dir.glob("create-*.cache"))
    install_launchers.install(bindir, "/bin/false")   # the same paths (the key names the launcher's)

    config = load_config(str(shim.config), {})
    command = parse_runc_argv(argv)
    written = []
    monkeypatch.setattr(bundle_spec, "write_spec", lambda _bundle, document: written.append(document))

    def python_rewrite(data: bytes):
        written.clear()
        (bundle / "config.json").write_bytes(data)
        modify_bundle("nvidia-container-runtime", command, config, shim.env(), None, None)
        return written[0] if written else json_codec.loads(data)

    def target(data):
        (bundle / "config.json").write_bytes(data)
        result = subprocess.run([str(shim.shim), *argv], env=shim.env(), capture_output=True,
                                stdin=subprocess.DEVNULL, timeout=60)
        assert result.returncode in (0, 1), f"the launcher ended with {result.returncode}: {result.stderr!r}"
        after = (bundle / "config.json").read_bytes()
        if result.returncode == 1 or after == data:   # left to Python (here /bin/false), or no request at all
            assert after == data
            return False
        try:
            expected = python_rewrite(data)
        except Exception as exc:   # a one-line error of Python's must not count as "refused" here
            raise AssertionError(f"the launcher edited a config.json Python refuses ({exc}): {data!r}") from None
        assert json_codec.loads(after) == expected, data
        return True

    def keep_request(document: dict) -> dict:
        """document with the cached request's members (and nothing that would make another request)."""
        process = document.get("process") if isinstance(document.get("process"), dict) else {}
        env = process.get("env") if isinstance(process.get("env"), list) else []
        env = [e for e in env if isinstance(e, str) and not e.startswith(("NVIDIA_", "CUDA_"))]
        document["process"] = {**process, "env": env + ["NVIDIA_VISIBLE_DEVICES=1"], "user": {"uid": 0, "gid": 0},
                               "capabilities": {"bounding": []}}
        if isinstance(document.get("annotations"), dict):
            document["annotations"] = {k: v for k, v in document["annotations"].items()
                                       if not (isinstance(k, str) and k.startswith("cdi.k8s.io/"))}
        if isinstance(document.get("mounts"), list):
            document["mounts"] = [m for m in document["mounts"] if not isinstance(m, dict)
                                  or not str(m.get("destination")).startswith("/var/run/nvidia-container-devices/")]
        return document

    # not ASCII-escaped: a JSON escape (a backslash) sends every create to Python
    hits = strategies.oci_configs().map(keep_request).map(
        lambda d: json.dumps(d, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    fuzz(target, strategies.st.one_of(hits, strategies.config_json_bytes), profile, figures)


def test_oci_state(profile, figures, tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"},
                                                    "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}))
    from hook.prestart import load_container
    from hook.cdi_hook import read_state

    def target(data):
        oci, _, _ = load_container(read_state(io.BytesIO(data)))
        return use_request(oci, Config())

    fuzz(target, strategies.states(str(bundle)), profile, figures)


def test_config_json(profile, figures, tmp_path, spec_dir, monkeypatch):
    """The same bytes through the shim (every mode that edits config.json without NVML) and the hook."""
    from hook.cdi_hook import load_container_config

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    config = parse_config(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{spec_dir}"]\n'
                          '[nvidia-container-runtime-hook]\npath = "/bin/true"\n', "fuzz.toml")
    command = parse_runc_argv(["create", "--bundle", str(bundle), "fuzz"])
    environ = {"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache")}

    def write_spec(_bundle, document):  # what the rewrite would write must serialise and read back
        json_codec.loads(json_codec.dumps_compact(document))

    monkeypatch.setattr(bundle_spec, "write_spec", write_spec)

    def target(case):
        program, data = case
        (bundle / "config.json").write_bytes(data)
        try:
            modify_bundle(program, command, config, environ, None, None)
        finally:
            oci, _ = load_container_config(str(bundle))
            accepted = use_request(oci, config)
        return accepted

    programs = strategies.st.sampled_from(["nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy"])
    fuzz(target, strategies.st.tuples(programs, strategies.config_json_bytes), profile, figures)


def test_env_values(profile, figures):
    def target(case):
        config, env, capabilities = case
        oci = {"process": {"env": env, "capabilities": {"bounding": capabilities}}}
        return use_request(oci, config)

    fuzz(target, strategies.st.tuples(strategies.st.sampled_from(CONFIGS), strategies.env_entries,
                                      strategies.st.sampled_from(strategies.CAP_SETS)), profile, figures)


def test_annotations(profile, figures, registry):
    def target(case):
        config, annotations = case
        return use_request({"process": {"env": []}, "annotations": annotations}, config, registry)

    fuzz(target, strategies.st.tuples(strategies.st.sampled_from(CONFIGS), strategies.annotations), profile, figures)


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_cdi_spec(profile, figures, tmp_path, form):
    """A spec file as `nvidia-ctk cdi validate` reads it and as the shim's registry loads and applies it."""
    directory = tmp_path / "specs"
    directory.mkdir()
    path = directory / f"fuzz.{form}"

    def target(data):
        path.write_bytes(data)
        spec, problems = check_spec_file(path)
        registry = Registry((str(directory),), cache=ValidatedSpecCache(None))
        from cdi.apply import apply_edits

        for name in list(registry.devices)[:3]:
            json_codec.dumps_compact(apply_edits({"process": {"env": []}}, registry.edits_for([name])))
        assert (spec is None) == bool(registry.problems), "cdi validate and the registry disagree"
        return spec is not None

    fuzz(target, strategies.cdi_spec_json if form == "json" else strategies.cdi_spec_yaml, profile, figures)


def test_config_toml(profile, figures, tmp_path):
    """Read as the shim reads it: parsed, then kept (cdi.config_cache) and read back from the cache."""
    path = tmp_path / "config.toml"
    environ = {"NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache")}

    def target(data):
        path.write_bytes(data)
        os.utime(path, ns=(0, len(data)))  # a new identity each time, whatever the clock's resolution
        for _ in range(2):  # the second load may come from the kept document
            config = load_config(path, environ, use_cache=True)
            runtime_cache.request_markers(config)
            config.host_ldconfig()
        return True

    fuzz(target, strategies.config_toml(), profile, figures)


def test_ld_so_cache(profile, figures):
    def target(data):
        for entry in parse_ld_cache(data, "fuzz"):
            entry.arch, entry.is_64bit, entry.is_elf
        return True

    fuzz(target, strategies.ld_caches(), profile, figures)


def test_mig_minors(profile, figures, tmp_path):
    path = tmp_path / "mig-minors"

    def target(data):
        path.write_bytes(data)
        read_mig_control_minors(str(path))
        return bool(read_mig_minors(str(path)))

    fuzz(target, strategies.mig_minors, profile, figures)


@pytest.mark.parametrize("kind", ["state", "config.json"])
def test_c_hook_reader(probe, profile, figures, tmp_path, kind):
    """The same generated documents through nvidia-cdi-hook's C reader (in one run of its probe, under
    ASan/UBSan where available): it must give the bundle or root.path exactly as Python's reading does,
    or refuse exactly what Python refuses, and never crash; a state's pid and status too (the init a
    createRuntime hook joins)."""
    import sys

    docs = []

    def collect(doc):
        docs.append(doc)
        return True

    strategy = strategies.states(str(tmp_path)) if kind == "state" else strategies.config_json_bytes
    fuzz(collect, strategy, profile, figures)
    code = "s" if kind == "state" else "c"
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)   # Python's own limit on int digits is not JSON's
    try:
        expected = [python_outcome(code, doc) for doc in docs]
        processes = [python_process(doc) for doc in docs] if code == "s" else []
    finally:
        sys.set_int_max_str_digits(limit)
    results = probe.run([(code, doc) for doc in docs])
    differ = [(doc, got, want) for doc, got, want in zip(docs, results, expected)
              if (got[0], got[1] if got[0] == "ok" else None) != want]
    if processes:
        differ += [(doc, got, want) for doc, got, want in zip(docs, probe.run([("p", doc) for doc in docs]), processes)
                   if got != want]
    figures.update(accepted=sum(r[0] == "ok" for r in results), refused=sum(r[0] != "ok" for r in results),
                   read_differently=len(differ))
    assert not differ, differ[:3]
