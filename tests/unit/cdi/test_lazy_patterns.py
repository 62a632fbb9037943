"""The checks every container start does are plain string tests, the rarer ones regular expressions
compiled on first use (cdi.lazy_pattern): the same rules as the patterns they replace, and no re
import on the prestart hook's path for a GPU asked for by index."""
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cdi.driver_files import _valid_version
from cdi.errors import InvalidNameError
from cdi.qualified_name import validate_device_name, validate_vendor
from cdi.request import ID_FORMS, check_device_id, classify_id

REPO = Path(__file__).resolve().parents[3]
ALPHABET = "aZ09_.:-/ \té٣²İ"


def _samples():
    for n in range(1, 4):
        yield from ("".join(t) for t in itertools.product(ALPHABET, repeat=n))
    yield from ("1" * 9, "1" * 10, "a" * 64, "a" * 65, "nvidia.com", "gpu", "0:1", "a-", "-a", "a.b_c-d")


def _accepts(check, value):
    try:
        check(value)
        return True
    except InvalidNameError:
        return False


@pytest.mark.parametrize("check, pattern", [
    (validate_vendor, r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"),
    (validate_device_name, r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?"),
    (_valid_version, r"[0-9A-Za-z][0-9A-Za-z._-]{0,63}"),
])
def test_string_checks_are_the_patterns(check, pattern):
    compiled = re.compile(pattern)
    accepts = (lambda v: check(v)) if check is _valid_version else (lambda v: _accepts(check, v))
    for value in _samples():
        if len(value) <= 256:
            assert accepts(value) == bool(compiled.fullmatch(value)), value


@pytest.mark.parametrize("form, pattern", [
    ("mig-index", r"^[0-9]{1,9}:[0-9]{1,9}$"),
    ("gpu-uuid", r"(?ai)^GPU-[0-9A-Fa-f-]{1,64}$"),
    ("mig-uuid", r"(?ai)^MIG-[0-9A-Fa-f-]{1,64}$"),
])
def test_mig_index_and_uuid_forms_are_their_patterns(form, pattern):
    check, compiled = dict(ID_FORMS)[form], re.compile(pattern)
    heads = ["", "0", "12", "1" * 9, "1" * 10, "GPU-", "gpu-", "GpU-", "MIG-", "mig-", "MIG", "GPU_", "GPU--",
             "G\u0130U-", "MİG-", "0:", ":", "1:2:"]
    tails = ["", "0", "9", "a", "F", "f0-", "g", "z", ":", ":1", "0:1", "-", "٣", "1" * 9, "1" * 10, "a" * 63,
             "a" * 64, "a" * 65, "-" * 64, " "]
    for value in (h + t for h in heads for t in tails):
        assert bool(check.match(value)) == bool(compiled.match(value)), value


def test_index_form_is_the_pattern():
    index = dict(ID_FORMS)["index"]
    compiled = re.compile(r"^[0-9]{1,9}$")
    for value in _samples():
        assert bool(index.match(value)) == bool(compiled.match(value)), value
    assert not index.match("5\n")   # stricter than `$`; such ids are refused earlier anyway


@pytest.mark.parametrize("device_id, form", [
    ("0", "index"), ("0:1", "mig-index"), ("gpu-AB12-cd", "gpu-uuid"), ("MIG-ab-1", "mig-uuid"),
    ("0000:01:00.0", "pci"), ("01:00.7", "pci"), ("GPU-\u0130", "unknown"), ("x", "unknown")])
def test_forms(device_id, form):
    assert classify_id(device_id) == form


def test_a_gpu_by_index_imports_no_re(tmp_path):
    code = ("import sys\n"
            "import cdi.config, cdi.request, cdi.selection, cdi.discover, cdi.driver_files, cdi.nvml\n"
            "from cdi.config import load_config\nfrom cdi.request import resolve_device_request\n"
            "from cdi.driver_files import _valid_version\n"
            "config = load_config()\n"
            "request = resolve_device_request({'process': {'env': ['NVIDIA_VISIBLE_DEVICES=0,1']}}, config)\n"
            "assert request.is_gpu_container and _valid_version('550.54.15')\n"
            "print('re' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {[str(REPO)]!r}\n{code}"],
                            capture_output=True, text=True, cwd=REPO,
                            env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml"), "PATH": "/usr/bin:/bin"})
    assert result.stdout.strip() == "False", result.stderr


def test_rarer_checks_still_work():
    assert check_device_id("GPU-0123abcd", "x") == "GPU-0123abcd"
    with pytest.raises(Exception):
        check_device_id("GPU-zz", "x")
