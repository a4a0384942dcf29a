"""The two shapes every operation speaks: parameters out, rows back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

#: One result row, as the executor fetched it (a tuple).
Row = tuple[Any, ...]
#: The parameters of one statement, in placeholder order.
Params = tuple[Any, ...]


# Array parameters as text literals, cast in the statement (``%s::bigint[]``): psycopg's list
# dumper is Python and inspects every element, about 2 us an element (a batch of 100 ids
# cost 0.1 ms of client CPU a statement); building the literal costs a twentieth of that.
# Only for elements whose text needs no quoting in an array literal.


def int_array(values: Iterable[int]) -> str:
    """``{1,2,3}``: a Postgres array literal of ints."""
    return "{" + ",".join(map(str, values)) + "}"


def token_array(values: Sequence[str | None]) -> str:
    """A ``uuid[]`` literal of hex (or hyphenated) uuid texts; None is a NULL element."""
    return "{" + ",".join("NULL" if value is None else value for value in values) + "}"
