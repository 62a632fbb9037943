"""libcontainer_c.privileges: the capability table is the kernel's (checked against linux/capability.h),
and keeping a set of capabilities works without CAP_SETPCAP too (the prestart hook's drop, as root, is
checked in tests/unit/hook/test_prestart.py)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from libcontainer_c.privileges import CAPABILITY_NUMBERS, capability_mask

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc and the kernel headers")
def test_capability_numbers_are_the_kernels(tmp_path):
    src = tmp_path / "caps.c"
    src.write_text("#include <stdio.h>\n#include <linux/capability.h>\nint main(void) {\n"
                   + "".join(f'    printf("{name} %d\\n", CAP_{name.upper()});\n' for name in CAPABILITY_NUMBERS)
                   + "    return 0;\n}\n")
    subprocess.run(["gcc", str(src), "-o", str(tmp_path / "caps")], check=True)
    printed = subprocess.run([str(tmp_path / "caps")], capture_output=True, text=True, check=True).stdout
    assert {name: int(number) for name, number in (line.split() for line in printed.splitlines())} \
        == CAPABILITY_NUMBERS


def test_unknown_capability_name():
    with pytest.raises(KeyError):
        capability_mask(["sys_everything"])


def test_keeping_capabilities_in_a_child():
    """Whoever runs the test: the effective and permitted sets end up within the kept ones, inheritable
    and ambient empty, no_new_privs set (as root the bounding set too; without CAP_SETPCAP it stays)."""
    code = ("from libcontainer_c.privileges import keep_only_capabilities; "
            "keep_only_capabilities(['dac_override', 'fowner']); print(open('/proc/self/status').read())")
    status = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=REPO,
                            env={"PYTHONPATH": str(REPO)}, check=True).stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    kept = capability_mask(["dac_override", "fowner"])
    for field in ("CapEff", "CapPrm"):
        assert int(fields[field], 16) & ~kept == 0, field
    assert int(fields["CapInh"], 16) == 0 and int(fields["CapAmb"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
