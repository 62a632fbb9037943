"""Device cgroup v1: let a container open the device nodes it was given.

    path = devices_cgroup_of(container_pid)            # e.g. "/docker/<id>"
    allow_devices(path, [device_rule("c", 195, 0), device_rule("c", 195, 255)])

The rule is written to ``<hierarchy>/<path>/devices.allow``; the path is walked below the hierarchy
(which must be a cgroup v1 mount) without following any symlink and without leaving that mount. Hosts
with cgroup v2 need an eBPF device program instead; this module does not cover them.
"""
import os

from ._native import lib
from .errors import ContainerFsError
from .rootfs import check

DEFAULT_HIERARCHY = "/sys/fs/cgroup/devices"


def device_rule(kind: str, major, minor, access: str = "rw") -> str:
    """Format and check one rule: kind c|b|a, major/minor a number or "*", access a subset of rwm."""
    if kind not in ("c", "b", "a"):
        raise ValueError(f"device rule: type {kind!r} is not c, b or a")
    for name, number in (("major", major), ("minor", minor)):
        if number != "*" and not (isinstance(number, int) and 0 <= number < 1 << 32):
            raise ValueError(f"device rule: {name} {number!r} is not a number or '*'")
    if not access or set(access) - set("rwm") or len(set(access)) != len(access):
        raise ValueError(f"device rule: access {access!r} is not a subset of 'rwm'")
    return f"{kind} {major}:{minor} {access}"


def find_devices_hierarchy(mountinfo: str = "/proc/self/mountinfo") -> str:
    """Mount point of the cgroup v1 hierarchy that has the devices controller."""
    with open(mountinfo) as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup" and "devices" in fields[sep + 3].split(","):
                return fields[4].replace("\\040", " ")
    raise ContainerFsError(2, "find devices cgroup hierarchy", mountinfo)  # ENOENT


def devices_cgroup_of(pid) -> str:
    """The devices cgroup path of process ``pid`` (from /proc/<pid>/cgroup), e.g. "/docker/<id>"."""
    path = f"/proc/{int(pid)}/cgroup"
    try:
        with open(path) as f:
            for line in f:
                _, controllers, cgroup = line.rstrip("\n").split(":", 2)
                if "devices" in controllers.split(","):
                    return cgroup
    except OSError as err:
        raise ContainerFsError(err.errno, "read cgroup", path) from None
    raise ContainerFsError(2, "find devices cgroup", path)  # ENOENT: no v1 devices controller


def _write_rules(cgroup, rules, hierarchy, file):
    hierarchy = hierarchy or DEFAULT_HIERARCHY
    if ".." in cgroup.split("/"):
        raise ContainerFsError(1, f"write {file}", cgroup)  # EPERM: only paths below the hierarchy
    for rule in rules:
        check(lib.gct_cgroup_v1_device_rule(os.fsencode(hierarchy), os.fsencode(cgroup),
                                            os.fsencode(file), rule.encode()),
              f"write {file} ({rule})", os.path.join(hierarchy, cgroup.lstrip("/")))


def allow_devices(cgroup: str, rules, hierarchy: str = None) -> None:
    """Append each rule (see :func:`device_rule`) to the cgroup's devices.allow."""
    _write_rules(cgroup, rules, hierarchy, "devices.allow")


def deny_devices(cgroup: str, rules, hierarchy: str = None) -> None:
    """Append each rule to the cgroup's devices.deny ("a *:* rwm" denies everything)."""
    _write_rules(cgroup, rules, hierarchy, "devices.deny")
