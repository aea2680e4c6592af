"""A wire format for the project's dataclasses that runs no code when it is read.

Actors on a work pool write what they return to shared storage that other processes read
(tasks/workpool/protocol.py), so reading it must never execute anything: no pickle. A blob is

    MAGIC | u64 header length | JSON header | per array or bytes value: u64 length | payload

The JSON header names the top-level dataclass (which must be on the codec's allow-list) and the
format version, and holds every field: scalars as JSON, lists and tuples as lists, dicts (string
keys) and nested dataclasses as tagged objects, and a reference to a payload for each numpy
array (written by np.lib.format with allow_pickle=False: dtype and shape round-trip exactly),
numpy scalar and bytes value (raw). Decoding follows the dataclass's type hints: a field hinted
as a dataclass is decoded as that dataclass, so nested dataclasses need no registration; fields
hinted loosely (`dict`, `Any`) take any tree of plain values and arrays. Every mismatch between
the blob and the hints is a WireError naming the field. Pure: no Prefect, no torch.
"""

from __future__ import annotations

import dataclasses
import io
import json
import struct
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

import numpy as np

MAGIC = b"MRLW"
FORMAT_VERSION = 1
_LEN = struct.Struct("<Q")
# Tags of the JSON objects that are not plain dicts of the value.
_DICT, _DATACLASS, _ARRAY, _SCALAR, _BYTES = "$dict", "$dataclass", "$array", "$scalar", "$bytes"

T = TypeVar("T")


class WireError(ValueError):
    """A blob that is not this format, names a type off the allow-list, or breaks the schema."""


class Codec:
    """Encode and decode instances of an explicit allow-list of dataclasses.

    Only the top-level types need listing: dataclasses nested in their fields are reached
    through the listed types' type hints, and only those.
    """

    def __init__(self, *allowed: type):
        for cls in allowed:
            if not dataclasses.is_dataclass(cls):
                raise TypeError(f"{cls!r} is not a dataclass")
        self.allowed: dict[str, type] = {cls.__name__: cls for cls in allowed}
        if len(self.allowed) != len(allowed):
            raise TypeError("two allowed dataclasses share a name")

    # -- encode --------------------------------------------------------------------------
    def encode(self, obj: object) -> bytes:
        cls = type(obj)
        if self.allowed.get(cls.__name__) is not cls:
            raise WireError(f"{cls.__name__} is not on this codec's allow-list "
                            f"({', '.join(sorted(self.allowed))})")
        payloads: list[bytes] = []
        header = {"format": FORMAT_VERSION, "type": cls.__name__,
                  "fields": _encode_fields(obj, payloads, cls.__name__)}
        head = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
        parts = [MAGIC, _LEN.pack(len(head)), head]
        for payload in payloads:
            parts += [_LEN.pack(len(payload)), payload]
        return b"".join(parts)

    # -- decode --------------------------------------------------------------------------
    def decode(self, data: bytes, expected: type[T]) -> T:
        """The object in `data`, which must be an `expected` (an allowed type)."""
        if self.allowed.get(expected.__name__) is not expected:
            raise WireError(f"{expected.__name__} is not on this codec's allow-list")
        header, payloads = _split(data)
        if header.get("format") != FORMAT_VERSION:
            raise WireError(f"wire format {header.get('format')!r}, expected {FORMAT_VERSION}")
        name = header.get("type")
        if name not in self.allowed:
            raise WireError(f"type {name!r} is not on this codec's allow-list "
                            f"({', '.join(sorted(self.allowed))})")
        if name != expected.__name__:
            raise WireError(f"expected a {expected.__name__}, got a {name}")
        return _decode_dataclass(expected, header.get("fields"), payloads, name)


# -- encoding ------------------------------------------------------------------------------
def _encode_fields(obj: object, payloads: list[bytes], path: str) -> dict[str, object]:
    return {f.name: _encode(getattr(obj, f.name), payloads, f"{path}.{f.name}")
            for f in dataclasses.fields(obj) if f.init}


def _encode(value: object, payloads: list[bytes], path: str) -> object:
    if isinstance(value, np.generic):  # before float: np.float64 is one; keep its dtype
        return _encode(np.asarray(value), payloads, path) | {_SCALAR: True}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise WireError(f"{path}: object arrays cannot be encoded")
        buf = io.BytesIO()
        np.lib.format.write_array(buf, value, allow_pickle=False)
        payloads.append(buf.getvalue())
        return {_ARRAY: len(payloads) - 1}
    if isinstance(value, (bytes, bytearray, memoryview)):
        payloads.append(bytes(value))
        return {_BYTES: len(payloads) - 1}
    if isinstance(value, (list, tuple)):
        return [_encode(v, payloads, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise WireError(f"{path}: dict keys must be str, got {type(key).__name__}")
            out[key] = _encode(v, payloads, f"{path}[{key!r}]")
        return {_DICT: out}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_DATACLASS: type(value).__name__,
                "fields": _encode_fields(value, payloads, path)}
    raise WireError(f"{path}: cannot encode a {type(value).__name__}")


# -- decoding ------------------------------------------------------------------------------
def _split(data: bytes) -> tuple[dict[str, object], list[bytes]]:
    view = memoryview(data)
    if bytes(view[:len(MAGIC)]) != MAGIC:
        raise WireError(f"not a {MAGIC.decode()} wire blob (starts {bytes(view[:8])!r})")
    pos = len(MAGIC)
    chunks: list[bytes] = []
    while pos < len(view):
        if pos + _LEN.size > len(view):
            raise WireError("truncated blob")
        (size,) = _LEN.unpack_from(view, pos)
        pos += _LEN.size
        if pos + size > len(view):
            raise WireError("truncated blob")
        chunks.append(bytes(view[pos:pos + size]))
        pos += size
    if not chunks:
        raise WireError("blob has no header")
    try:
        header = json.loads(chunks[0])
    except ValueError as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("header is not a JSON object")
    return header, chunks[1:]


def _decode_dataclass(cls: type[T], raw: object, payloads: list[bytes], path: str) -> T:
    if not isinstance(raw, dict):
        raise WireError(f"{path}: expected the fields of a {cls.__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = set(raw) - set(fields)
    if unknown:
        raise WireError(f"{path}: {cls.__name__} has no field(s) {', '.join(sorted(unknown))}")
    missing = [name for name, f in fields.items() if name not in raw
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise WireError(f"{path}: {cls.__name__} is missing {', '.join(missing)}")
    values = {name: _decode(value, hints.get(name, Any), payloads, f"{path}.{name}")
              for name, value in raw.items()}
    return cls(**values)


def _decode(value: object, hint: object, payloads: list[bytes], path: str) -> object:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any or hint is object:
        return _decode_any(value, payloads, path)
    if origin is Union or origin is types.UnionType:
        return _decode_union(value, args, payloads, path)
    if hint is type(None):
        if value is not None:
            raise WireError(f"{path}: expected None")
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not (isinstance(value, dict) and value.get(_DATACLASS) == hint.__name__):
            raise WireError(f"{path}: expected a {hint.__name__}")
        return _decode_dataclass(hint, value.get("fields"), payloads, path)
    if hint is np.ndarray or origin is np.ndarray:
        return _payload_array(value, payloads, path, scalar=False)
    if isinstance(hint, type) and issubclass(hint, np.generic):
        return _payload_array(value, payloads, path, scalar=True)
    if hint is bytes:
        return _payload_bytes(value, payloads, path)
    if hint is bool:
        if not isinstance(value, bool):
            raise WireError(f"{path}: expected a bool, got {type(value).__name__}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise WireError(f"{path}: expected an int, got {type(value).__name__}")
        return value
    if hint is float:
        if isinstance(value, dict) and value.get(_SCALAR):
            return float(_payload_array(value, payloads, path, scalar=True))
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise WireError(f"{path}: expected a float, got {type(value).__name__}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise WireError(f"{path}: expected a str, got {type(value).__name__}")
        return value
    if hint in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, list):
            raise WireError(f"{path}: expected a list, got {type(value).__name__}")
        kind = origin or hint
        if kind is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise WireError(f"{path}: expected {len(args)} items, got {len(value)}")
            items = [_decode(v, a, payloads, f"{path}[{i}]")
                     for i, (v, a) in enumerate(zip(value, args, strict=True))]
        else:
            item = args[0] if args else Any
            items = [_decode(v, item, payloads, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if kind is tuple else items
    if hint is dict or origin in (dict, Mapping):
        if not (isinstance(value, dict) and isinstance(value.get(_DICT), dict)):
            raise WireError(f"{path}: expected a dict")
        item = args[1] if len(args) == 2 else Any
        return {k: _decode(v, item, payloads, f"{path}[{k!r}]") for k, v in value[_DICT].items()}
    raise WireError(f"{path}: no wire form for type hint {hint!r}")


def _decode_union(value: object, args: tuple[object, ...], payloads: list[bytes],
                  path: str) -> object:
    if value is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    if isinstance(value, dict) and _DATACLASS in value:
        options = [a for a in options if getattr(a, "__name__", None) == value[_DATACLASS]]
    errors = []
    for option in options:
        try:
            return _decode(value, option, payloads, path)
        except WireError as exc:
            errors.append(str(exc))
    raise WireError(f"{path}: matches none of {args}: {'; '.join(errors) or 'no candidate'}")


def _decode_any(value: object, payloads: list[bytes], path: str) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_decode_any(v, payloads, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if _DICT in value and isinstance(value[_DICT], dict):
            return {k: _decode_any(v, payloads, f"{path}[{k!r}]") for k, v in value[_DICT].items()}
        if _ARRAY in value:
            return _payload_array(value, payloads, path, scalar=bool(value.get(_SCALAR)))
        if _BYTES in value:
            return _payload_bytes(value, payloads, path)
        if _DATACLASS in value:
            raise WireError(f"{path}: a {value[_DATACLASS]} where the type hint names no "
                            "dataclass: hint the field with its dataclass type")
    raise WireError(f"{path}: not a wire value")


def _payload(value: object, tag: str, payloads: list[bytes], path: str) -> bytes:
    index = value.get(tag) if isinstance(value, dict) else None
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(payloads):
        raise WireError(f"{path}: expected a {tag[1:]} reference")
    return payloads[index]


def _payload_array(value: object, payloads: list[bytes], path: str, scalar: bool) -> object:
    blob = _payload(value, _ARRAY, payloads, path)
    try:
        array = np.lib.format.read_array(io.BytesIO(blob), allow_pickle=False)
    except ValueError as exc:
        raise WireError(f"{path}: bad array: {exc}") from None
    if scalar:
        if array.ndim != 0:
            raise WireError(f"{path}: expected a numpy scalar")
        return array[()]
    return array


def _payload_bytes(value: object, payloads: list[bytes], path: str) -> bytes:
    return _payload(value, _BYTES, payloads, path)
