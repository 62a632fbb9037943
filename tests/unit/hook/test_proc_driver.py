"""hook.proc_driver: the /proc/driver/nvidia view's contents and the batch operations that make it."""
from __future__ import annotations

import os

import pytest

from cdi.inventory import Gpu, MigDevice
from hook.proc_driver import (PROC_DIR, ProcViewError, add_to_batch, build_proc_view,
                              without_device_file_modification)


def gpu(index, bus):
    return Gpu(index=index, minor=index, uuid=f"GPU-{index}", name="x", brand="Nvidia", pci_bus_id=bus,
               architecture="Ampere", compute_capability="8.0")


@pytest.fixture
def proc(tmp_path):
    base = tmp_path / "nvidia"
    for bus in ("0000:07:00.0", "0000:0f:00.0"):
        (base / "gpus" / bus).mkdir(parents=True)
        (base / "gpus" / bus / "information").write_text(f"Bus Location: {bus}\n")
    (base / "version").write_text("NVRM version: 550.54.15\n")
    (base / "params").write_text("ResmanDebugLevel: 1\nModifyDeviceFiles: 1\nDeviceFileMode: 438\n")
    (base / "capabilities/gpu1/mig/gi7/ci0").mkdir(parents=True)
    (base / "capabilities/gpu1/mig/gi7/access").write_text("DeviceFileMinor: 201\n")
    (base / "capabilities/gpu1/mig/gi7/ci0/access").write_text("DeviceFileMinor: 202\n")
    (base / "capabilities/mig").mkdir(parents=True)
    (base / "capabilities/mig/config").write_text("DeviceFileMinor: 1\n")
    return base


def test_params_forbid_creating_device_files():
    assert without_device_file_modification(b"A: 1\nModifyDeviceFiles: 1\nB: 2\n") == b"A: 1\nModifyDeviceFiles: 0\nB: 2\n"


def test_view_holds_only_the_given_gpus(proc):
    view = build_proc_view(str(proc), [gpu(1, "00000000:0F:00.0")], [], lambda i: i)
    files = dict(view.files)
    assert set(files) == {"version", "params", "gpus/0000:0f:00.0/information"}   # no registry on this driver
    assert b"ModifyDeviceFiles: 0" in files["params"]
    assert view.dirs == ["gpus", "gpus/0000:0f:00.0"]


def test_view_of_a_mig_device_and_the_config_capability(proc):
    mig = MigDevice(parent_index=1, index=0, uuid="MIG-1", gi=7, ci=0, profile="1g.5gb", gi_cap_minor=201,
                    ci_cap_minor=202)
    view = build_proc_view(str(proc), [gpu(1, "00000000:0f:00.0")], [mig], lambda i: i, mig_config=True,
                           mig_monitor=True)
    names = [name for name, _ in view.files]
    assert {"capabilities/gpu1/mig/gi7/access", "capabilities/gpu1/mig/gi7/ci0/access",
            "capabilities/mig/config"} <= set(names)
    assert "capabilities/mig/monitor" not in names   # the driver has none here: left out
    # every directory comes before what is in it
    assert view.dirs.index("capabilities/gpu1/mig") < view.dirs.index("capabilities/gpu1/mig/gi7/ci0")


def test_no_driver_no_view(tmp_path):
    assert not build_proc_view(str(tmp_path / "missing"), [gpu(0, "00000000:07:00.0")], [], lambda i: i)


def test_oversized_or_linked_files_are_refused(proc, tmp_path):
    (proc / "registry").write_bytes(b"x" * (65 * 1024))
    with pytest.raises(ProcViewError, match="larger than"):
        build_proc_view(str(proc), [], [], lambda i: i)
    (proc / "registry").unlink()
    os.symlink("/etc/shadow", proc / "registry")
    with pytest.raises(ProcViewError, match="cannot read"):
        build_proc_view(str(proc), [], [], lambda i: i)


class RecordingBatch:
    def __init__(self):
        self.ops = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.ops.append((name, args, kwargs))


def test_batch_operations_only_where_the_directory_exists(proc):
    view = build_proc_view(str(proc), [gpu(0, "00000000:07:00.0")], [], lambda i: i)
    batch = RecordingBatch()
    add_to_batch(batch, view)
    kinds = [op[0] for op in batch.ops]
    assert kinds[0] == "tmpfs" and kinds[-1] == "remount"
    assert batch.ops[0][1][0] == PROC_DIR and batch.ops[-1][2] == {"readonly": True, "if_exists": True}
    assert all(op[2].get("if_exists") for op in batch.ops)   # nothing is made where there is no driver
    writes = [op[1][0] for op in batch.ops if op[0] == "write_file"]
    assert writes == [f"{PROC_DIR}/version", f"{PROC_DIR}/params", f"{PROC_DIR}/gpus/0000:07:00.0/information"]
    assert kinds.index("mkdirs") < kinds.index("write_file")
