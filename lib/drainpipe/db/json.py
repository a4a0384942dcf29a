"""JSON to and from jsonb: orjson both ways (most of a worker's client CPU is parsing
payloads), and checked on the way in, so what jsonb cannot hold exactly (NaN, a lone
surrogate, NUL, floats >= 1e16 written as integers) is a ``validation`` error or kept
exact, never a silently changed value."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from ..errors import validation_error
from ..validation import EXPONENT_FLOAT, has_non_finite, json_error, json_fault

if TYPE_CHECKING:
    pass


@cache
def _fast_json_loaders() -> dict[tuple[str, bool], type[Any]] | None:
    """psycopg loaders that hand json/jsonb straight to orjson, by (type, binary); None
    without orjson. Loader classes of our own rather than ``set_json_loads``: that one
    wraps the function in psycopg's generic loader, a Python call more per value."""
    if importlib.util.find_spec("orjson") is None:
        return None
    import json

    import orjson
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    # orjson reads integers beyond 64 bits as floats (or refuses them); jsonb keeps them
    # exact, and so must we: a document with a run of 19 or more digits is read by json,
    # which reads every integer as an int. (translate + find: a regex costs twice as much)
    digits_to_zero = bytes.maketrans(b"123456789", b"000000000")
    long_run = b"0" * 19

    def load(data: Any) -> Any:
        text = bytes(data)
        if long_run not in text.translate(digits_to_zero):
            try:
                return loads(text)
            except decode_error:
                pass
        return json.loads(text)

    class OrjsonLoader(Loader):
        def load(self, data: Any) -> Any:
            return load(data)

    class OrjsonBinaryLoader(OrjsonLoader):
        format = Format.BINARY  # json's binary form is its text

    class OrjsonbBinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Any:
            return load(data[1:])  # jsonb's binary form: a version byte, then the text

    return {
        ("json", False): OrjsonLoader,
        ("jsonb", False): OrjsonLoader,
        ("json", True): OrjsonBinaryLoader,
        ("jsonb", True): OrjsonbBinaryLoader,
    }


def load_json(data: bytes) -> Any:
    """JSON text (an HTTP body) as Python values, integers beyond 64 bits exact: orjson
    unless a run of 19 or more digits is in the text, then json (the rule of the psycopg
    loaders above, which keep their own copy: they are on the claim hot path)."""
    if b"0" * 19 not in data.translate(_DIGITS_TO_ZERO):
        try:
            import orjson

            return orjson.loads(data)
        except ImportError:
            pass
        except ValueError:  # orjson.JSONDecodeError; json says what is wrong, or reads it
            pass
    import json

    return json.loads(data)


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_JSON_OIDS = frozenset({114, 3802})  # json, jsonb


def _has_json_column(result: Any) -> bool:
    return any(result.ftype(column) in _JSON_OIDS for column in range(result.nfields))


#: What may need the careful path in orjson's output: NaN/Infinity become ``null``, floats
#: >= 1e16 are written as ``1e+16`` (jsonb stores that as an integer), jsonb refuses
#: ``\\u0000``. One regex search over a small payload's bytes (one call is cheaper than
#: three); over a large one, three substring searches (memchr-fast, the regex is not).
_SUSPECT = re.compile(rb"e\+|\\u0000|null").search
_SMALL = 2048
_NOTHING: Final = object()
#: The value :func:`dump_json` checked last and its bytes: the jsonb parameter of the same
#: object (enqueue checks, then the backend sends) reuses them instead of serialising again.
_last_dumped: tuple[Any, bytes] = (_NOTHING, b"")


def _suspect(data: bytes) -> bool:
    if len(data) <= _SMALL:
        return _SUSPECT(data) is not None
    return b"e+" in data or b"\\u0000" in data or b"null" in data


@cache
def _orjson_dumps() -> tuple[Callable[..., Any], Callable[[Any], Any]] | None:
    """orjson's checked dumps for :func:`dump_json`, and the jsonb parameter dumps that
    reuses what :func:`dump_json` just produced for the same object."""
    if importlib.util.find_spec("orjson") is None:
        return None
    import orjson

    dumps, options = orjson.dumps, orjson.OPT_NON_STR_KEYS

    def fast_dumps(value: Any, name: str = "payload", max_bytes: int | None = None) -> Any:
        try:
            data = dumps(value, option=options)
        except TypeError:  # a lone surrogate, an int beyond 64 bits, depth > 254, a non-JSON type
            return careful_dumps(value, name)
        if max_bytes is not None and len(data) > max_bytes:
            return data  # refused by the caller before anything scans it
        # a null is mostly a None: only a walk over the floats tells NaN apart
        if _suspect(data) and (b"e+" in data or b"\\u0000" in data or has_non_finite(value)):
            return careful_dumps(value, name)
        return data

    def param_dumps(value: Any) -> Any:
        # the jsonb parameter of the object enqueue just checked: its bytes, not a second
        # serialisation. Only this reader takes from the cache (dump_json always serialises
        # anew), and only for the very object checked, so a caller that changes an object
        # between two enqueues never sends the first one's bytes.
        global _last_dumped
        checked, data = _last_dumped
        if checked is value:
            _last_dumped = (_NOTHING, b"")
            return data
        return fast_dumps(value)

    return fast_dumps, param_dumps


def careful_dumps(value: Any, name: str = "payload") -> bytes:
    """``value`` as JSON that jsonb stores exactly, or ``validation`` naming the path of what
    it cannot hold (NaN/Infinity, a lone surrogate, NUL, nesting deeper than
    :data:`~drainpipe.validation.MAX_JSON_DEPTH`, a non-JSON type). Floats >= 1e16 are
    written with a fractional part, so they are read back as floats; integers keep every
    digit. The slow path: a Python walk over the value."""
    fault = json_fault(value)
    if fault is not None:
        raise json_error(fault, name)
    import orjson

    return orjson.dumps(_exact_numbers(value, orjson.Fragment), option=orjson.OPT_NON_STR_KEYS)


_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


def _exact_numbers(value: Any, fragment: Any) -> Any:
    """A copy of a checked JSON value whose big floats and integers beyond 64 bits are raw
    JSON fragments: ``10000000000000000.0`` (the float's exact value; jsonb keeps the ``.0``)
    and every digit of the integer (orjson refuses it)."""
    if isinstance(value, float):
        if abs(value) >= EXPONENT_FLOAT:  # always a whole number: 1e16 > 2**53
            return fragment(f"{int(value)}.0")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value if _INT64_MIN <= value <= _UINT64_MAX else fragment(str(value))
    if isinstance(value, dict):
        return {key: _exact_numbers(item, fragment) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_exact_numbers(item, fragment) for item in value]
    return value


def dump_json(value: Any, name: str = "payload", *, max_bytes: int | None = None) -> bytes:
    """``value`` serialised as it will be stored, checked (see :func:`careful_dumps`); over
    ``max_bytes`` → ``validation`` with code ``PAYLOAD_TOO_LARGE`` (a ``len`` of the bytes)."""
    global _last_dumped
    fast = _orjson_dumps()
    data: bytes = (
        fast[0](value, name, max_bytes) if fast is not None else careful_dumps(value, name)
    )
    if max_bytes is not None and len(data) > max_bytes:
        raise validation_error(
            f"{name} is {len(data)} bytes as JSON, more than the {max_bytes} bytes allowed",
            [{"message": f"At most {max_bytes} bytes as JSON", "path": [name]}],
            code="PAYLOAD_TOO_LARGE",
        )
    _last_dumped = (value, data)
    return data


def jsonb(value: Any) -> Any:
    """A jsonb parameter, serialised with orjson (several times faster than ``json.dumps``;
    everything drainpipe stores is plain JSON data by then) and checked as it is: what jsonb
    cannot hold exactly is a ``validation`` error, never a silently changed value."""
    from psycopg.types.json import Jsonb

    dumps = _orjson_dumps()
    return Jsonb(value, dumps=dumps[1] if dumps is not None else careful_dumps)


def use_fast_json(context: Any) -> None:
    """Decode json/jsonb with orjson on a connection or cursor: parsing payloads is most of
    a worker's client-side CPU, and orjson does it several times faster than ``json``."""
    loaders = _fast_json_loaders()
    if loaders is not None:
        adapters = context.adapters
        for (name, _binary), loader in loaders.items():
            adapters.register_loader(name, loader)
