"""json.loads and a compact json.dumps without importing the json package.

Why: json's Python layer imports re, and re brings enum, functools and collections: about 12 ms of
wall time per process on the machines this project is tested on, paid by the runtime shim on every
GPU container's create and by the prestart hook at every start, for two documents (config.json and a
spec). The parsing and the serialising are done by the same C code json uses (`_json.make_scanner`,
`_json.make_encoder`) with json's own default settings; this module only adds what json.loads and
json.dumps add around them. Anything it does not take as a whole goes to the json package itself,
which then decides and words the error: the results are json's in every case (tests/unit/cdi/
test_json_codec.py holds both to that on many documents).
"""
from __future__ import annotations

_WHITESPACE = " \t\n\r"   # json.decoder.WHITESPACE


class _ScannerSettings:
    """What json.loads gives its C scanner (json.decoder.JSONDecoder's defaults)."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


def loads(data: bytes | str) -> object:
    """json.loads(data). The C scanner parses what JSONDecoder.decode would hand it (the value after
    leading whitespace, nothing but whitespace after it); not UTF-8, a BOM, any error or a Python
    without _json: json.loads itself runs."""
    try:
        from _json import make_scanner

        text = data.decode("utf-8") if isinstance(data, bytes) else data
        start = len(text) - len(text.lstrip(_WHITESPACE))
        value, end = make_scanner(_ScannerSettings)(text, start)
        if not text[end:].strip(_WHITESPACE):
            return value
    except Exception:   # noqa: BLE001  (StopIteration for "no value", ValueError, RecursionError ...)
        pass
    import json

    return json.loads(data)


def _not_serializable(value: object) -> object:
    # json.JSONEncoder.default's message
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps_compact(value: object) -> str:
    """json.dumps(value, ensure_ascii=False, separators=(",", ":")): the C encoder with those settings
    (circular check on, keys unsorted, NaN allowed, as json.dumps)."""
    try:
        from _json import encode_basestring, make_encoder
    except ImportError:
        make_encoder = None
    if make_encoder is None:
        import json

        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, str):   # JSONEncoder.encode's own shortcut for a bare string
        return encode_basestring(value)
    encode = make_encoder({}, _not_serializable, encode_basestring, None, ":", ",", False, False, True)
    return "".join(encode(value, 0))
