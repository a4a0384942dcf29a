"""Vercel function /api/orders: each ``api/*.py`` file is one function; its app lives in
``functions/orders.py`` (run locally by ``drainpipe dev``, which serves this folder)."""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
# Vercel imports this file by its path: make functions/ importable, and drainpipe itself
# from lib/ (no package index serves it; Vercel installs what pyproject.toml depends on)
for _path in (os.path.join(_ROOT, "lib"), _ROOT):
    if _path not in sys.path and os.path.isdir(_path):
        sys.path.insert(0, _path)
from functions.orders import app  # noqa: E402

__all__ = ["app"]
