"""simulator.kernel_files and simulator.device_nodes: what the kernel module would show, and majors
that no live driver owns."""
from __future__ import annotations

import pytest

from cdi.nvml import read_mig_minors
from simulator.device_nodes import Majors, choose_majors, used_char_majors
from simulator.host_spec import SimulatorError, build_host_spec
from simulator.kernel_files import kernel_files, mig_minors_text, proc_devices_text

PROC_DEVICES = """Character devices:
  1 mem
  4 tty
195 something
249 watchdog

Block devices:
  7 loop
254 virtblk
"""


def test_majors_keep_195_when_free_and_avoid_every_used_major(tmp_path):
    assert choose_majors({1, 4, 249}) == Majors(nvidia=195, uvm=120, caps=121, imex=122, drm=226)
    taken = choose_majors({195, 120, 122, 226})   # a host with a DRM driver: /dev/dri gets a local major
    chosen = {taken.nvidia, taken.uvm, taken.caps, taken.imex, taken.drm}
    assert len(chosen) == 5 and chosen.isdisjoint({195, 120, 122, 226})
    with pytest.raises(SimulatorError, match="no free character device majors"):
        choose_majors(set(range(0, 512)))


def test_used_majors_come_from_the_character_section_only(tmp_path):
    path = tmp_path / "devices"
    path.write_text(PROC_DEVICES)
    assert used_char_majors(str(path)) == {1, 4, 195, 249}   # 7 and 254 are block majors


def test_proc_devices_adds_the_driver_majors_to_the_character_section():
    text = proc_devices_text(PROC_DEVICES, Majors(nvidia=195, uvm=120, caps=121, imex=122))
    char, block = text.split("Block devices:")
    assert "195 nvidia-frontend" in char and "120 nvidia-uvm" in char and "121 nvidia-caps" in char
    assert "122 nvidia-caps-imex-channels" in char
    assert "nvidia" not in block and "254 virtblk" in block
    majors = [int(line.split()[0]) for line in char.splitlines()[1:] if line.strip()]
    assert majors == sorted(majors)


def test_mig_minors_lists_every_gi_and_ci_with_the_real_layout(tmp_path):
    host = build_host_spec("/x", gpus=2)
    text = mig_minors_text(host)
    assert text.startswith("config 1\nmonitor 2\n")
    assert "gpu0/gi0/access 3\n" in text and "gpu0/gi0/ci0/access 4\n" in text
    assert "gpu1/gi14/ci7/access 272\n" in text     # 3 + 135 + 9*14 + 1 + 7
    assert len(text.splitlines()) == 2 + 2 * 15 * 9
    path = tmp_path / "mig-minors"
    path.write_text(text)
    minors = read_mig_minors(str(path))
    assert minors[(1, 2, None)] == 3 + 135 + 18 and minors[(1, 2, 3)] == 3 + 135 + 18 + 4


def test_kernel_files_describe_each_gpu_and_each_mig_instance():
    host = build_host_spec("/x", gpus=2, driver_version="535.104.05", mig_options=["1=3g.20gb"])
    files = kernel_files(host, Majors(195, 120, 121, 122), PROC_DEVICES)
    assert "Kernel Module  535.104.05" in files["proc/driver/nvidia/version"]
    assert "DeviceFileMode: 438" in files["proc/driver/nvidia/params"]
    info = files["proc/driver/nvidia/gpus/0000:0f:00.0/information"]
    assert f"GPU UUID: \t {host.gpus[1].uuid}\n" in info and "Device Minor: \t 1\n" in info
    mig = host.gpus[1].migs[0]
    assert files[f"proc/driver/nvidia/capabilities/gpu1/mig/gi{mig.gi}/access"].startswith(
        f"DeviceFileMinor: {mig.gi_cap_minor}\n")
    assert files[f"proc/driver/nvidia/capabilities/gpu1/mig/gi{mig.gi}/ci0/access"].startswith(
        f"DeviceFileMinor: {mig.ci_cap_minor}\n")
    assert not any(k.startswith("proc/driver/nvidia/capabilities/gpu0/") for k in files)
    assert files["sys/module/nvidia/version"] == "535.104.05\n"
    assert files["sys/bus/pci/devices/0000:07:00.0/vendor"] == "0x10de\n"
    # each GPU's DRM nodes under its PCI device, as the drm class lists them (NVIDIA's tools look there)
    assert files["sys/bus/pci/devices/0000:07:00.0/drm/card1/dev"] == "226:1\n"
    assert files["sys/bus/pci/devices/0000:0f:00.0/drm/renderD129/dev"] == "226:129\n"
    assert "226 drm" in files["proc/devices"]


def test_read_mig_minors_ignores_other_lines_and_tolerates_a_missing_file(tmp_path):
    path = tmp_path / "mig-minors"
    path.write_text("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngarbage\ngpuX/gi1/access 5\n")
    assert read_mig_minors(str(path)) == {(0, 1, None): 12, (0, 1, 0): 13}
    assert read_mig_minors(str(tmp_path / "missing")) == {}


def test_read_mig_minors_skips_non_ascii_digits(tmp_path):
    # str.isdigit() takes '²', int() refuses it: such a line must be skipped, not raise
    path = tmp_path / "mig-minors"
    path.write_text("gpu0/gi1/access \u00b2\ngpu0/gi1/ci0/access 13\n")
    assert read_mig_minors(str(path)) == {(0, 1, 0): 13}


def test_read_mig_control_minors_takes_config_and_monitor_with_fixed_defaults(tmp_path):
    from cdi.nvml import read_mig_control_minors

    path = tmp_path / "mig-minors"
    path.write_text("config 5\ngpu0/gi1/access 12\nmonitor \u00b2\n")
    assert read_mig_control_minors(str(path)) == {"config": 5, "monitor": 2}
    assert read_mig_control_minors(str(tmp_path / "missing")) == {"config": 1, "monitor": 2}


def test_mig_minors_that_are_not_text_are_skipped_line_by_line(tmp_path):
    """The driver writes ASCII; a line with other bytes (a corrupted or forged file in a driver root) is
    skipped like any other unknown line, never a UnicodeDecodeError (found by tests/reliability)."""
    from cdi.nvml import read_mig_control_minors

    path = tmp_path / "mig-minors"
    path.write_bytes(b"\x80\xff garbage\ngpu0/gi1/access 12\ngpu\xd9\xa3/gi1/access 7\nconfig 4\nmonitor \xff\n")
    assert read_mig_minors(str(path)) == {(0, 1, None): 12}
    assert read_mig_control_minors(str(path)) == {"config": 4, "monitor": 2}
