"""A root transform of a CDI spec: paths under one root moved under another (`nvidia-ctk cdi transform
root`), as NVIDIA's tool does it, e.g. a spec generated inside a driver container (libraries under
/run/nvidia/driver) made right for the host (libraries under /):

    transform_root(spec, "/run/nvidia/driver", "/", relative_to="host")

A path is under the root when it is the root or the root is a whole leading part of it
(/run/nvidia/driver-backup is not under /run/nvidia/driver); the root "/" holds every absolute path.

Which paths, relative_to="host" (what the host sees): device nodes' hostPath (their path when they have
none), mounts' hostPath, hook paths (not of startContainer hooks: those run in the container). "container":
device nodes' path, mounts' containerPath, startContainer hook paths.

Hook arguments: those of an nvidia-cdi-hook entry (`nvidia-cdi-hook SUBCOMMAND ...`, `nvidia-ctk hook
...`) by what each option names: --link TARGET::LINK and --folder are container paths, --ldconfig-path
(with its '@') and --params-file host paths. This toolkit's entry is a createRuntime hook whose
arguments are container paths (it joins the container's mount namespace itself), so the hook's name
cannot tell. Any other hook's arguments as NVIDIA's tool takes them: every argument (both sides of
'::') for "host" when the hook is neither createContainer nor startContainer, for "container" when
it is one of those two.
"""
from __future__ import annotations

import posixpath

from cdi.spec import ContainerEdits, Hook, Spec

HOST, CONTAINER = "host", "container"
RELATIVE_TO = (HOST, CONTAINER)
IN_CONTAINER_HOOKS = ("createContainer", "startContainer")
# nvidia-cdi-hook options naming a path, by where the path is
CONTAINER_PATH_OPTIONS = ("--link", "--folder")
HOST_PATH_OPTIONS = ("--ldconfig-path", "--params-file")
HOOK_PROGRAMS = ("nvidia-cdi-hook", "nvidia-ctk")


def transform_path(path: str, root: str, to: str) -> str:
    """path with a leading `root` replaced by `to`; any other path as it is."""
    root = posixpath.normpath(root) if root else root
    if not root or not path.startswith("/"):
        return path
    if root == "/":
        rest = path.lstrip("/")
    elif path == root or path.startswith(root + "/"):
        rest = path[len(root):].lstrip("/")
    else:
        return path
    return posixpath.normpath(posixpath.join(to, rest)) if rest else posixpath.normpath(to)


def transform_root(spec: Spec, root: str, to: str, relative_to: str = HOST) -> Spec:
    """The spec with the root of its host (or container) paths moved; the spec is changed in place."""
    if relative_to not in RELATIVE_TO:
        raise ValueError(relative_to)
    edits = [spec.container_edits] + [d.container_edits for d in spec.devices]
    for e in edits:
        if e is not None:
            _edits(e, lambda p: transform_path(p, root, to), relative_to == HOST)
    return spec


def _edits(edits: ContainerEdits, move, host: bool) -> None:
    for node in edits.device_nodes:
        if host:
            node.host_path = move(node.host_path or node.path)
        else:
            node.path = move(node.path)
    for mount in edits.mounts:
        if host:
            mount.host_path = move(mount.host_path)
        else:
            mount.container_path = move(mount.container_path)
    for hook in edits.hooks:
        if (hook.hook_name != "startContainer") == host:
            hook.path = move(hook.path)
        hook.args = _hook_args(hook, move, host)


def _is_cdi_hook(hook: Hook) -> bool:
    args = hook.args
    return bool(args) and posixpath.basename(args[0]) == "nvidia-cdi-hook" or \
        len(args) > 1 and posixpath.basename(args[0]) == "nvidia-ctk" and args[1] == "hook"


def _both_sides(arg: str, move) -> str:
    if "::" not in arg:
        return move(arg)
    target, _, link = arg.partition("::")
    return f"{move(target)}::{move(link)}"


def _hook_args(hook: Hook, move, host: bool) -> list[str]:
    if not _is_cdi_hook(hook):
        if (hook.hook_name in IN_CONTAINER_HOOKS) == host:
            return list(hook.args)
        return [_both_sides(arg, move) for arg in hook.args]
    options = HOST_PATH_OPTIONS if host else CONTAINER_PATH_OPTIONS
    out, after = [], None
    for arg in hook.args:
        name, equals, value = arg.partition("=")
        if after is not None:
            out.append(_path_value(arg, move))
            after = None
        elif name in options and equals:
            out.append(f"{name}={_path_value(value, move)}")
        else:
            out.append(arg)
            after = arg if arg in options else None
    return out


def _path_value(value: str, move) -> str:
    if value.startswith("@"):   # --ldconfig-path @/sbin/ldconfig: the host's
        return "@" + move(value[1:])
    return _both_sides(value, move)
