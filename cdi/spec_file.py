"""A CDI spec file on disk: read, parsed and checked (check_spec_file, load_spec_file), or rendered and
written (render_spec, write_spec), JSON or YAML by the file's extension.

cdi/spec.py holds the spec's types and their JSON form, cdi/validate.py the rules a document must keep;
this module joins the two to files, so neither of them needs the other.
"""
from __future__ import annotations

import os

from cdi.errors import SpecError
from cdi.regular_file import read_regular_file
from cdi.spec import Spec
from cdi.validate import Problem, validate_document

# A spec is a few hundred KiB at most; refusing giants keeps a hostile file from eating memory.
MAX_SPEC_BYTES = 16 * 1024 * 1024


def is_yaml_path(path: str | os.PathLike) -> bool:
    return str(path).endswith((".yaml", ".yml"))


def parse_spec_text(text: str | bytes, path: str, yaml_format: bool | None = None) -> dict:
    """The raw document of a spec file (JSON, or YAML with names kept as strings)."""
    if yaml_format is None:
        yaml_format = is_yaml_path(path)
    if yaml_format:
        from cdi.spec_yaml import load_yaml_document  # imported only when a YAML spec is read

        document = load_yaml_document(text, path)
    else:
        from cdi import json_codec   # json_codec: a GPU container's create reads specs without json/re

        try:
            document = json_codec.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SpecError(f"invalid JSON: {exc}", path) from None
    # strict UTF-8 cannot carry a surrogate: only an escape (JSON's \uD800, YAML's \uD800 or \U0000D800)
    # can make one, so the walk runs only when the text has such an escape
    escapes = (b"\\u", b"\\U") if isinstance(text, bytes) else ("\\u", "\\U")
    if escapes[0] in text or escapes[1] in text:
        _refuse_lone_surrogates(document, path)
    return document


def _refuse_lone_surrogates(document: object, path: str) -> None:
    """A string (or key) holding a lone surrogate cannot be written out as UTF-8 (into config.json, by
    the runtime) and no spec writer makes one: the spec is invalid."""
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack += value
            stack += value.values()
        elif isinstance(value, list):
            stack += value
        elif isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise SpecError("invalid spec: a string holds a lone surrogate", path) from None


def _check_hook_env(spec: Spec, where: str) -> None:
    """Project rule (docs/reference.md#hook-env): every hook we write carries a non-empty env. Engines
    drop an empty one, and the hook then runs with the image's environment (runc) or the engine's (crun)."""
    edits = [("$.containerEdits", spec.container_edits)] + \
        [(f"$.devices[{i}].containerEdits", d.container_edits) for i, d in enumerate(spec.devices)]
    for at, e in edits:
        for j, hook in enumerate(e.hooks if e else []):
            if not hook.env:
                raise SpecError(f"{at}.hooks[{j}]: a hook we write must carry a non-empty env", where)


def _yaml_text(document: dict) -> str:
    """The document as cdi.spec_yaml writes it: by cdi.yaml_plain when it can be sure of the very same
    text (a generated spec; no PyYAML import), else by PyYAML."""
    from cdi.yaml_plain import dump_plain_yaml

    text = dump_plain_yaml(document)
    if text is None:
        from cdi.spec_yaml import dump_yaml_document

        text = dump_yaml_document(document)
    return text


def render_spec(spec: Spec, where: str, yaml_format: bool = False, own_hooks: bool = True) -> str:
    """The spec as JSON or YAML text, checked first as write_spec checks it (SpecError naming `where`).
    own_hooks=False: the hooks are someone else's, passed on as they are (`cdi transform`), so the rule
    for the hooks this toolkit writes (_check_hook_env) is not theirs."""
    document = spec.to_dict()
    validate_document(document, where, raise_first=True)
    if own_hooks:
        _check_hook_env(spec, where)
    if yaml_format:
        return _yaml_text(document)
    import json

    return json.dumps(document, indent=2) + "\n"


def write_spec(spec: Spec, path: str | os.PathLike, mode: int = 0o644,
               yaml_format: bool | None = None, own_hooks: bool = True) -> str | os.PathLike:
    """Write spec to path (format by extension, unless yaml_format says) through a temp file and a
    rename, so a reader never sees half a spec; the content is validated first, so we never write a
    spec consumers reject. Returns path as given. A path that is (or links to) a device, FIFO or socket
    is refused: the rename would put a regular file in its place (`--output /dev/null` once replaced
    the host's /dev/null)."""
    import stat

    from cdi.new_file import create_new_file   # only when writing: reading specs imports neither

    name = os.fspath(path)
    text = render_spec(spec, name, is_yaml_path(name) if yaml_format is None else yaml_format, own_hooks)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode) \
                or stat.S_ISSOCK(st.st_mode):
            raise SpecError("not a regular file: writing the spec (a new file renamed over the path) would "
                            "replace it", name)
    folder, base = os.path.split(name)
    fd, tmp = create_new_file(folder, f".{base}.", ".tmp", 0o600, token_bytes=6)   # as tempfile.mkstemp
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, name)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def read_spec_bytes(path: str | os.PathLike) -> tuple[bytes, os.stat_result]:
    """The content of a spec file and the fstat of the very file read (the cache key of cdi.registry)."""
    try:
        return read_regular_file(path, MAX_SPEC_BYTES)
    except ValueError as exc:
        raise SpecError(str(exc), str(path)) from None


def load_document(path: str | os.PathLike) -> tuple[dict, os.stat_result]:
    data, st = read_spec_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 text: byte {exc.start}", str(path)) from None
    return parse_spec_text(text, str(path)), st


def load_spec_file(path: str | os.PathLike) -> Spec:
    """The validated spec in path, or a SpecError naming its first problem (and how many there are)."""
    spec, problems = check_spec_file(path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SpecError(f"invalid CDI spec: {problems[0].what}{more}", str(path))
    return spec


def check_spec_file(path: str | os.PathLike) -> tuple[Spec | None, list[Problem]]:
    """Read, parse and validate one spec file: (the spec, []) or (None, its problems).
    A file that cannot be read or parsed is one problem at `$`."""
    file = str(path)
    try:
        document, _ = load_document(path)
    except SpecError as exc:
        return None, [Problem(file, "$", "parse", exc.what)]
    except OSError as exc:
        return None, [Problem(file, "$", "read", exc.strerror or str(exc))]
    problems = validate_document(document, file)
    if problems:
        return None, problems
    try:
        return Spec.from_dict(document), []
    except SpecError as exc:  # cannot happen for a document the schema accepted; kept as a clear error
        return None, [Problem(file, exc.where or "$", "type", exc.what)]
