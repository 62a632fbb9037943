"""Giving up the capabilities a program does not need (the C helper's privileges.c).

    keep_only_capabilities(["sys_admin", "dac_override", "setuid"], not_inherited=["setuid"])

keeps those in the bounding (but not_inherited), effective and permitted sets, empties the inheritable and ambient sets
and sets no_new_privs, so nothing the program execs can gain privileges from a setuid bit or file
capabilities. Without CAP_SETPCAP the bounding set stays as it is (the other sets are still reduced).
"""
from ._native import lib
from .rootfs import check

# Capability numbers of linux/capability.h: kernel ABI, never renumbered.
CAPABILITY_NUMBERS = {
    "chown": 0, "dac_override": 1, "dac_read_search": 2, "fowner": 3, "fsetid": 4, "kill": 5, "setgid": 6,
    "setuid": 7, "setpcap": 8, "linux_immutable": 9, "net_bind_service": 10, "net_broadcast": 11,
    "net_admin": 12, "net_raw": 13, "ipc_lock": 14, "ipc_owner": 15, "sys_module": 16, "sys_rawio": 17,
    "sys_chroot": 18, "sys_ptrace": 19, "sys_pacct": 20, "sys_admin": 21, "sys_boot": 22, "sys_nice": 23,
    "sys_resource": 24, "sys_time": 25, "sys_tty_config": 26, "mknod": 27, "lease": 28, "audit_write": 29,
    "audit_control": 30, "setfcap": 31, "mac_override": 32, "mac_admin": 33, "syslog": 34, "wake_alarm": 35,
    "block_suspend": 36, "audit_read": 37, "perfmon": 38, "bpf": 39, "checkpoint_restore": 40,
}


def capability_mask(names) -> int:
    """The bit mask of capability names ("sys_admin"); an unknown name is a KeyError."""
    mask = 0
    for name in names:
        mask |= 1 << CAPABILITY_NUMBERS[name]
    return mask


def keep_only_capabilities(names, not_inherited=()) -> None:
    """`not_inherited`: names of `names` this process keeps that leave the bounding set, so that no
    program it execs gets them even as root."""
    check(lib.gct_keep_capabilities(capability_mask(names), capability_mask(not_inherited)),
          "dropping capabilities")
