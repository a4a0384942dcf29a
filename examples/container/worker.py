"""What ``drainpipe work --app worker:worker`` runs in the container: the queues and
handlers of ``functions/_app.py`` (the same code the functions use), on ``DATABASE_URL``.

A function, not an object built at import: the process reads its configuration when it
starts working, and importing this file (``drainpipe work --help``, a test) needs none.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from drainpipe.jobs import Jobs
from drainpipe.serve import WorkerApp

FUNCTIONS = Path(os.environ.get("FUNCTIONS_DIR") or "functions").resolve()


def worker() -> WorkerApp:
    if str(FUNCTIONS) not in sys.path:  # functions/ modules import ``_app`` by name
        sys.path.insert(0, str(FUNCTIONS))
    from _app import HANDLERS, QUEUES

    database_url = os.environ.get("DATABASE_URL")
    if not database_url:
        raise ValueError("set DATABASE_URL (the service role's connection string)")
    # a lease longer than any handler runs; the heartbeat extends it every half lease
    return WorkerApp(Jobs(database_url, QUEUES), HANDLERS, lease=120)
