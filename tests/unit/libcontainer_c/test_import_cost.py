"""The hooks import these modules on every container start: they must stay cheap (stdlib basics and
the compiled module only; DESIGN: the hot path imports nothing it does not need)."""
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HEAVY = {"re", "json", "subprocess", "typing", "dataclasses", "pathlib", "enum", "logging",
         "click", "yaml", "jsonschema", "pynvml", "tomlkit", "pyroute2"}

PROBE = """
import sys, time
sys.path[:0] = {paths!r}
before = set(sys.modules)
t = time.perf_counter()
import libcontainer_c.batch, libcontainer_c.ldconfig, libcontainer_c.device_cgroup, libcontainer_c.rootfs
print(time.perf_counter() - t)
print(" ".join(sorted(set(sys.modules) - before)))
"""


def test_wrappers_import_nothing_heavy():
    paths = [str(REPO), sysconfig.get_paths()["platlib"], sysconfig.get_paths()["purelib"]]
    out = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE.format(paths=paths)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    seconds, modules = float(out[0]), set(out[1].split())
    assert not modules & HEAVY, sorted(modules & HEAVY)
    assert {"libcontainer_c._native", "_cffi_backend"} <= modules
    assert seconds < 0.1  # about 7 ms here; generous for loaded machines
