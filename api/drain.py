"""Vercel function /api/drain: each ``api/*.py`` file is one function; its app lives in
``functions/drain.py`` (run locally by ``drainpipe dev``, which serves this folder)."""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # Vercel imports this file by its path: make functions/ importable
    sys.path.insert(0, _ROOT)
from functions.drain import app  # noqa: E402

__all__ = ["app"]
