"""Vercel function /api/agent_inbox (vercel.json rewrites /v1/:path* to it, keeping the
path): the agent inbox's HTTP API; its app lives in ``functions/agent_inbox.py``. The
WebSocket stream runs only where that app is served by uvicorn (``drainpipe serve``)."""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # no pathlib: cold start
if _ROOT not in sys.path:  # Vercel imports this file by its path: make functions/ importable
    sys.path.insert(0, _ROOT)
from functions.agent_inbox import app  # noqa: E402

__all__ = ["app"]
