"""The two shapes every operation speaks: parameters out, rows back."""

from __future__ import annotations

from typing import Any

#: One result row, as the executor fetched it (a tuple).
Row = tuple[Any, ...]
#: The parameters of one statement, in placeholder order.
Params = tuple[Any, ...]
