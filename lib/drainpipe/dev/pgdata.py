"""Where ``drainpipe dev`` keeps its embedded Postgres, one data folder per checkout.

Two ``drainpipe dev`` sessions started from two checkouts get two folders, so two servers:
stopping one never stops the other's database. A data folder is also locked while a session
uses it, so a second session on the same folder (``--pgdata`` given twice) is refused with
one clear line instead of silently sharing, and then losing, the first one's server.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path
from typing import IO

CACHE = Path("~/.cache/drainpipe")


class PgdataInUse(RuntimeError):
    """Another ``drainpipe dev`` holds the data folder's lock."""

    def __init__(self, pgdata: Path, holder: str) -> None:
        who = f" (pid {holder})" if holder else ""
        super().__init__(
            f"another drainpipe dev{who} is using the embedded Postgres in {pgdata};"
            " stop it, or pass --pgdata DIR (or --database-url URL) for a database of this"
            " session's own"
        )
        self.pgdata = pgdata


def default_pgdata(checkout: Path) -> Path:
    """The data folder for the project folder ``checkout`` (the one holding ``api/``):
    ``~/.cache/drainpipe/dev-pgdata-<folder name>-<hash of its path>``, the same on every
    run from that folder, another one for every other checkout."""
    resolved = checkout.expanduser().resolve()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", resolved.name)[:40] or "root"
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return CACHE / f"dev-pgdata-{name}-{digest}"


class PgdataLock:
    """An exclusive lock on ``<pgdata>.lock`` (beside the data folder, which the embedded
    server's own user owns), held while a session uses the folder. The operating system
    drops it when the process ends, however it ends, so a crash leaves no stale lock."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata.expanduser()
        self.path = self.pgdata.with_name(self.pgdata.name + ".lock")
        self._file: IO[str] | None = None

    def acquire(self) -> PgdataLock:
        """Take the lock, or raise :class:`PgdataInUse` naming the holder's pid."""
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks here; folders are still per checkout
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise PgdataInUse(self.pgdata, holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()  # closing drops the lock
            self._file = None

    def __enter__(self) -> PgdataLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
