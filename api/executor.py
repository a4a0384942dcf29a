"""Vercel function /api/executor (and every path below it, rewritten here in vercel.json):
job executors claiming and settling jobs over HTTP; its app lives in
``functions/executor.py`` (run locally by ``drainpipe dev``)."""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # Vercel imports this file by its path: make functions/ importable
    sys.path.insert(0, _ROOT)
from functions.executor import app  # noqa: E402

__all__ = ["app"]
