"""cdi.nvml stays cheap to import (the runtime shim may use it on a container's start path) and keeps
to one driver root per process."""
from __future__ import annotations

import subprocess
import sys

from cdi.nvml import NO_DRIVER_HINT


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_loads_neither_pynvml_nor_ctypes():
    done = run("import sys, cdi.nvml; print(sorted(m for m in ('pynvml', 'ctypes', 'click') if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_root_without_a_driver_is_a_clear_error_and_nothing_is_loaded(tmp_path):
    (tmp_path / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    done = run(f"""
import sys
from cdi.nvml import NvmlError, load_inventory
try:
    load_inventory({str(tmp_path)!r})
except NvmlError as e:
    print(e.what, '|', e.where, '|', 'pynvml' in sys.modules)
""")
    assert done.stdout.strip() == (f"no NVIDIA driver: libnvidia-ml.so.1 not found in the driver root; "
                                   f"{NO_DRIVER_HINT} | {tmp_path} | False")


def test_a_library_that_is_not_elf_is_reported_with_its_path(tmp_path):
    lib_dir = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libnvidia-ml.so.1").write_text("not a library")
    done = run(f"""
from cdi.nvml import NvmlError, load_inventory
try:
    load_inventory({str(tmp_path)!r})
except NvmlError as e:
    print(e.what.split(':')[0], '|', e.where)
""")
    assert done.stdout.strip() == f"the NVML library is unusable | {lib_dir}/libnvidia-ml.so.1"


def test_a_link_out_of_the_root_is_not_followed(tmp_path):
    lib_dir = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib_dir.mkdir(parents=True)
    # an absolute link restarts at the driver root, so this names <root>/etc/passwd, which is absent
    (lib_dir / "libnvidia-ml.so.1").symlink_to("/etc/passwd")
    done = run(f"""
from cdi.nvml import find_nvml_library
from cdi.driver_root import DriverRoot
print(find_nvml_library(DriverRoot({str(tmp_path)!r})))
""")
    assert done.stdout.strip() == "None"


def test_a_reader_that_dies_without_its_line_is_still_one_error(tmp_path):
    """gct-nvml-inventory ends itself with a line whatever the library does; should it die anyway
    (killed from outside), load_inventory says so in one NvmlError naming it."""
    lib_dir = tmp_path / "root/usr/lib/x86_64-linux-gnu"
    lib_dir.mkdir(parents=True)
    (tmp_path / "nvml.c").write_text("int nvmlInit_v2(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib_dir / "libnvidia-ml.so.1"), str(tmp_path / "nvml.c")],
                   check=True)
    bin_dir, helper = tmp_path / "bin", tmp_path / "libexec/gct-nvml-inventory"   # <prefix>/libexec beside bin
    bin_dir.mkdir()
    helper.parent.mkdir()
    helper.write_text("#!/bin/sh\nkill -KILL $$\n")
    helper.chmod(0o755)
    done = run(f"""
from cdi.nvml import NvmlError, load_inventory
try:
    load_inventory({str(tmp_path / "root")!r}, bin_dir={str(bin_dir)!r})
except NvmlError as e:
    print(e.what, '|', e.where)
""")
    assert done.stdout.strip() == f"gct-nvml-inventory failed (killed by signal 9) without its error line | {helper}", done.stderr
