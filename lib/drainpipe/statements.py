"""Sans-I/O operations: for each database operation, its statement, the function that builds
its parameters and the function that reads its rows. Nothing here opens a connection.

An executor runs them: ``parse(rows)`` of ``fetch(STATEMENT, params(...))``. Today that is
the async :class:`drainpipe.db.Database` (in ``backends/sql.py``, ``idempotency/``,
``leases/`` and ``webhooks/``); a synchronous psycopg executor runs the very same
operations, so the sync twin is another executor rather than a copy of the SQL and the
parsing. Each package keeps its own statements (``webhooks.statements``,
``console.management_statements``, ...); the job storages' are in ``backends``: a job's own
path beside the calls that run it (``backends.sql_enqueue``, ``backends.sql_leases``), the
rest in ``backends.*_statements`` (docs/architecture.md says why). This module only lists
them all.

Shape, per operation ``x`` of a statements module:

- ``X``: the statement, a precomputed string with ``%s`` placeholders; it calls exactly one
  ``drainpipe.<function>(`` (written out literally, so a rename of the SQL functions is a
  search and replace);
- ``x_params(...) -> Params``: the parameters, validated and converted already by the
  caller (the public objects check their input; these only shape it);
- ``parse_x(rows) -> result``: the typed result from the rows the executor fetched.

Statements are module constants and the builders plain functions rather than objects per
call: claim, complete and enqueue run once per job, and an operation costs one round trip
plus two function calls, no allocation of its own.
"""

from __future__ import annotations

from .agents import statements as agents
from .agents import store as agent_store
from .agents import stream as agent_stream
from .backends import job_statements as jobs
from .backends import pause_statements as pause
from .backends import record_statements as records
from .backends import schedule_statements as schedules
from .backends import sql_enqueue as enqueue
from .backends import sql_leases as job_leases
from .console import console_statements as console
from .console import management_statements as management
from .db.statement_shapes import Params, Row
from .idempotency import statements as idempotency
from .leases import statements as leases
from .webhooks import statements as inbox

__all__ = [
    "STATEMENTS",
    "Params",
    "Row",
    "agent_store",
    "agent_stream",
    "agents",
    "console",
    "enqueue",
    "idempotency",
    "inbox",
    "job_leases",
    "jobs",
    "leases",
    "management",
    "pause",
    "records",
    "schedules",
]

#: Every statement of every operation, by ``<operations>.<CONSTANT>`` (for checks and
#: tools); the names are the operations', not their modules' (those say where they live)
STATEMENTS: dict[str, str] = {
    f"{operations}.{name}": value
    for operations, modules in {
        "jobs": (enqueue, job_leases, jobs),
        "records": (records,),
        "schedules": (schedules,),
        "idempotency": (idempotency,),
        "leases": (leases,),
        "inbox": (inbox,),
        "management": (management,),
        "agents": (agents, agent_store, agent_stream),
        "pause": (pause,),
        "console": (console,),
    }.items()
    for module in modules
    for name, value in vars(module).items()
    if name.isupper() and isinstance(value, str) and value.startswith("SELECT ")
}
