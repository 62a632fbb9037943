"""Setting keys of config.toml while keeping its comments and layout (`nvidia-ctk config --set`).

    document = parse_document(text, path)            # tomlkit: comments and order are kept
    set_key(document, *parse_setting("nvidia-container-cli.no-cgroups", ","), path)
    check_document(document, path)                    # cdi.config's own rules: types, choices
    text = render_document(document)

A setting is NVIDIA's `--set` form: `KEY=VALUE`, or a bare `KEY` for a boolean (true). KEY is a dotted
path of cdi.config's keys (`nvidia-container-runtime.modes.cdi.spec-dirs`, `features.NAME`); a list
value is split at the list separator. An unknown key is an error here (a typo would otherwise be a
silent no-op), while reading a config only warns about one.
"""
from __future__ import annotations

from cdi.config import FEATURES, Config, config_from_document, supported_choices
from cdi.errors import ConfigError
from cdi.record import MISSING, fields, is_record

# Go's strconv.ParseBool, which NVIDIA's tool uses for these values
_BOOLEANS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
             **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}


def _field_of(dotted: str) -> tuple[object, tuple[str, ...] | None]:
    """(the default, the values users may choose) of a leaf key: its type tells how to read a value;
    ConfigError when unknown."""
    cls, parts = Config, dotted.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if cls is Config and part == "features" and len(parts) == 2 and parts[1] in FEATURES:
            return False, None
        by_key = {f.metadata["toml"]: f for f in fields(cls) if f.metadata.get("toml")}
        f = by_key.get(part)
        if f is None or part == "features":
            break
        default = f.default if f.default_factory is MISSING else f.default_factory()
        if is_record(default) and not last:
            cls = type(default)
        elif not is_record(default) and last:
            return default, supported_choices(f)
        else:
            break
    raise ConfigError(f"unknown config key {dotted!r}", "--set")


def parse_setting(setting: str, list_separator: str = ",") -> tuple[str, object]:
    """(dotted key, value) from `KEY=VALUE` or a bare boolean `KEY`."""
    key, has_value, text = setting.partition("=")
    default, choices = _field_of(key)
    if isinstance(default, bool):
        if not has_value:
            return key, True
        if text not in _BOOLEANS:
            raise ConfigError(f"{key} must be a boolean (true or false), not {text!r}", "--set")
        return key, _BOOLEANS[text]
    if not has_value:
        raise ConfigError(f"expected {key}=VALUE", "--set")
    if isinstance(default, tuple):
        return key, text.split(list_separator) if text else []
    if choices and text not in choices:   # e.g. mode=csv, which the config reads but the runtime refuses
        raise ConfigError(f"{key} must be one of {', '.join(choices)}, not {text!r}", "--set")
    return key, text


def parse_document(text: str, source: str):
    import tomlkit
    from tomlkit.exceptions import ParseError

    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        raise ConfigError(f"invalid TOML: {exc}", source) from None
    except RecursionError:   # tomlkit bounds nesting itself; this keeps any deeper path one line too
        raise ConfigError("invalid TOML: nested too deeply", source) from None


def set_key(document, key: str, value: object, source: str) -> None:
    """document[a][b]... = value, making the tables on the way (headers only where a key goes)."""
    import tomlkit

    container, parts = document, key.split(".")
    for depth, part in enumerate(parts[:-1]):
        if part not in container:
            container[part] = tomlkit.table(is_super_table=depth < len(parts) - 2)
        container = container[part]
        if not isinstance(container, dict):
            raise ConfigError(f"{'.'.join(parts[:depth + 1])} is not a table", source)
    container[parts[-1]] = value


def check_document(document, source: str) -> Config:
    """The configuration the edited document gives, held to cdi.config's rules."""
    return config_from_document(document.unwrap(), source)


def render_document(document) -> str:
    import tomlkit

    return tomlkit.dumps(document)


def _defaults_table(cls: type) -> dict:
    """cls's keys with their defaults, tables (records) after plain keys, as TOML writes them."""
    plain, tables = {}, {}
    for f in fields(cls):
        key = f.metadata.get("toml")
        if not key or key == "features":   # features: none is on by default
            continue
        default = f.default if f.default_factory is MISSING else f.default_factory()
        if is_record(default):
            tables[key] = _defaults_table(type(default))
        else:
            plain[key] = list(default) if isinstance(default, tuple) else default
    return {**plain, **tables}


def default_config_text() -> str:
    """`nvidia-ctk config default`: every key with its built-in default, as a config.toml."""
    import tomlkit

    return tomlkit.dumps(_defaults_table(Config))
