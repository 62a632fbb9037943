"""Device cgroups: let a container open the device nodes it was given.

cgroup v1 (rules appended to ``devices.allow``):

    allow_devices(devices_cgroup_of(pid), [device_rule("c", 195, 0), device_rule("c", 195, 255)])

cgroup v2 (an eBPF device program; attached programs are ANDed, so ours REPLACES the runtime's, and
whatever our rules do not allow is decided by the runtime's program through a tail call):

    allow_devices_v2(cgroup2_path_of(pid), [device_rule("c", 195, 0)])

Cgroup paths are walked below the hierarchy (which must be the right kind of cgroup mount) without
following any symlink and without leaving that mount.
"""
import os

from ._native import ffi, lib
from .errors import ContainerFsError
from .rootfs import check

DEFAULT_HIERARCHY = "/sys/fs/cgroup/devices"
_ACCESS_BITS = {"m": lib.GCT_DEV_MKNOD, "r": lib.GCT_DEV_READ, "w": lib.GCT_DEV_WRITE}


class DeviceRule:
    """One device rule: ``type`` c|b|a, ``major``/``minor`` a number or "*", ``access`` a subset of
    "rwm", ``allow`` or deny. ``str(rule)`` is the cgroup v1 line ("c 195:0 rw")."""
    __slots__ = ("type", "major", "minor", "access", "allow")

    def __init__(self, type: str, major, minor, access: str = "rw", allow: bool = True):
        if type not in ("c", "b", "a"):
            raise ValueError(f"device rule: type {type!r} is not c, b or a")
        for name, number in (("major", major), ("minor", minor)):
            if number != "*" and not (isinstance(number, int) and not isinstance(number, bool)
                                      and 0 <= number < 1 << 31):
                raise ValueError(f"device rule: {name} {number!r} is not a number or '*'")
        if not access or set(access) - set("rwm") or len(set(access)) != len(access):
            raise ValueError(f"device rule: access {access!r} is not a subset of 'rwm'")
        self.type, self.major, self.minor, self.access, self.allow = type, major, minor, access, allow

    @classmethod
    def from_oci(cls, entry: dict) -> "DeviceRule":
        """From an entry of config.json ``linux.resources.devices`` (missing fields mean "any")."""
        major, minor = entry.get("major"), entry.get("minor")
        return cls(entry.get("type") or "a", "*" if major in (None, -1) else major,
                   "*" if minor in (None, -1) else minor, entry.get("access") or "rwm",
                   bool(entry.get("allow")))

    def __str__(self) -> str:
        return f"{self.type} {self.major}:{self.minor} {self.access}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self.allow and str(self) == other
        return isinstance(other, DeviceRule) and (str(self), self.allow) == (str(other), other.allow)

    def __repr__(self) -> str:
        return f"DeviceRule({'allow' if self.allow else 'deny'} {self})"


def device_rule(kind: str, major, minor, access: str = "rw", allow: bool = True) -> DeviceRule:
    """Check and build one rule (see DeviceRule); ``str()`` of it is the v1 line."""
    return DeviceRule(kind, major, minor, access, allow)


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
        rule = str(rule)
        check(lib.gct_cgroup_v1_device_rule(os.fsencode(hierarchy), os.fsencode(cgroup),
                                            os.fsencode(file), rule.encode()),
              f"write {file} ({rule})", os.path.join(hierarchy, cgroup.lstrip("/")))


def allow_devices(cgroup: str, rules, hierarchy: str = None) -> None:
    """Append each rule (see :func:`device_rule`) to the cgroup's devices.allow."""
    _write_rules(cgroup, rules, hierarchy, "devices.allow")


def deny_devices(cgroup: str, rules, hierarchy: str = None) -> None:
    """Append each rule to the cgroup's devices.deny ("a *:* rwm" denies everything)."""
    _write_rules(cgroup, rules, hierarchy, "devices.deny")


def find_cgroup2_hierarchy(mountinfo: str = "/proc/self/mountinfo") -> str:
    """Mount point of the cgroup2 filesystem (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid hosts)."""
    with open(mountinfo) as f:
        for line in f:
            fields = line.split()
            if fields[fields.index("-") + 1] == "cgroup2":
                return fields[4].replace("\\040", " ")
    raise ContainerFsError(2, "find cgroup2 hierarchy", mountinfo)  # ENOENT


def cgroup2_path_of(pid) -> str:
    """The cgroup v2 path of process ``pid`` (the "0::" line of /proc/<pid>/cgroup)."""
    path = f"/proc/{int(pid)}/cgroup"
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n")
    except OSError as err:
        raise ContainerFsError(err.errno, "read cgroup", path) from None
    raise ContainerFsError(2, "find cgroup2 path", path)  # ENOENT


def _v2_rules(rules):
    array = ffi.new("struct gct_device_rule[]", max(len(rules), 1))
    for c_rule, rule in zip(array, rules):
        c_rule.allow = int(rule.allow)
        c_rule.type = rule.type.encode()
        c_rule.major = -1 if rule.major == "*" else rule.major
        c_rule.minor = -1 if rule.minor == "*" else rule.minor
        c_rule.access = sum(_ACCESS_BITS[a] for a in rule.access)
    return array


def install_device_program(cgroup: str, rules, hierarchy: str = None, keep_existing: bool = False) -> None:
    """Attach a device program built from ``rules`` (DeviceRule list, the last matching rule wins) to
    the v2 cgroup, in place of the program attached there. Nothing matched: the replaced program's
    verdict when ``keep_existing``, else deny. EBUSY when several programs are attached."""
    hierarchy = hierarchy or find_cgroup2_hierarchy()
    if ".." in cgroup.split("/"):
        raise ContainerFsError(1, "attach device program", cgroup)  # EPERM
    rules = list(rules)
    check(lib.gct_devcg_v2_install(os.fsencode(hierarchy), os.fsencode(cgroup), _v2_rules(rules),
                                   len(rules), int(keep_existing)),
          "attach device program", os.path.join(hierarchy, cgroup.lstrip("/")))


def allow_devices_v2(cgroup: str, rules, hierarchy: str = None) -> None:
    """Allow ``rules`` on top of what the cgroup's current device program allows."""
    install_device_program(cgroup, rules, hierarchy, keep_existing=True)


def device_programs_attached(cgroup: str, hierarchy: str = None) -> int:
    """How many device programs the v2 cgroup has attached."""
    hierarchy = hierarchy or find_cgroup2_hierarchy()
    return check(lib.gct_devcg_v2_count(os.fsencode(hierarchy), os.fsencode(cgroup)),
                 "query device programs", os.path.join(hierarchy, cgroup.lstrip("/")))


def allow_devices_for(pid, rules) -> str:
    """Allow ``rules`` (DeviceRule list) for the container whose init is ``pid``, on whichever device
    cgroup it has: v1 ``devices.allow`` when its devices controller is on a v1 hierarchy, else the v2
    eBPF program (replaced, keeping the runtime's verdicts). Returns "v1" or "v2"."""
    path = f"/proc/{int(pid)}/cgroup"
    try:
        with open(path) as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError as err:
        raise ContainerFsError(err.errno, "read cgroup", path) from None
    for _, controllers, cgroup in lines:
        if "devices" in controllers.split(","):
            allow_devices(cgroup, rules, find_devices_hierarchy())
            return "v1"
    for hierarchy_id, controllers, cgroup in lines:
        if hierarchy_id == "0" and controllers == "":
            allow_devices_v2(cgroup, rules)
            return "v2"
    raise ContainerFsError(2, "find device cgroup", path)  # ENOENT
