"""PostgREST's RPC half, emulated on real Postgres for respx: any function of an exposed
schema, called the way PostgREST calls it.

``PostgrestEmulation`` answers ``POST {BASE}/rest/v1/rpc/<fn>`` as PostgREST does:
- the ``apikey``/``Authorization`` pair picks the role (service_role or anon), else 401
  ``PGRST301``;
- ``Content-Profile`` (``Accept-Profile`` too, when sent) must name an exposed schema, else
  406 ``PGRST106`` "The schema must be one of the following: ...";
- the function is looked up in its schema cache (``pg_proc``, read once per function, as
  PostgREST caches it) by name and by the JSON body's keys: unknown keys or a missing
  argument without a default → 404 ``PGRST202`` "Could not find the function ...";
- the body's keys are named arguments, typed by ``jsonb_to_record`` with the declared types
  (JSON arrays become Postgres arrays, strings timestamps), run in a transaction as the
  key's role;
- the answer: a ``setof`` function → a JSON array, a scalar one → the value (``jsonb`` as
  it is), a raised exception or any database error → ``{code, message, details, hint}``
  with PostgREST's status for its SQLSTATE (P0001 → 400, 42501 → 403/401, ...).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psycopg
import respx
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

BASE = "https://project.supabase.test"
SERVICE_KEY = "service-role-key"
ANON_KEY = "anon-key"
ROLE_BY_KEY = {SERVICE_KEY: "service_role", ANON_KEY: "anon"}
EXPOSED = ("public", "graphql_public", "pgmq_public", "drainpipe_api")

_SIGNATURE = """
SELECT p.proretset, coalesce(p.proargnames, '{}'),
       array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t),
       p.pronargs - p.pronargdefaults
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = %s AND p.proname = %s
"""


def postgrest_status(exc: psycopg.Error, role: str) -> int:
    """PostgREST's HTTP status for a SQLSTATE (its documented table, the part we can meet)."""
    state = exc.sqlstate or ""
    if state == "42501":
        return 401 if role == "anon" else 403
    if state in ("42883", "42P01"):
        return 404
    if state in ("23505", "23503"):
        return 409
    if state.startswith(("08", "53")):
        return 503
    if state.startswith(("25", "40", "57", "XX")):
        return 500
    return 400  # P0001 (RAISE), 22xxx, 23xxx, 42xxx ...


def error_response(
    status: int, code: str, message: str, details: Any = None, hint: Any = None
) -> httpx.Response:
    return httpx.Response(
        status, json={"code": code, "message": message, "details": details, "hint": hint}
    )


class PostgrestEmulation:
    """Executes RPCs of the ``exposed`` schemas on the database behind ``pool``."""

    def __init__(self, pool: AsyncConnectionPool[Any], exposed: Iterable[str] = EXPOSED) -> None:
        self.pool = pool
        self.exposed = tuple(exposed)
        self.requests: list[httpx.Request] = []
        #: seconds each answer waits first: a network round trip, for the benchmark
        self.round_trip = 0.0
        self._cache: dict[tuple[str, str], tuple[bool, list[str], list[str], int] | None] = {}

    def calls(self, fn: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        made = [(r.url.path.rsplit("/", 1)[-1], json.loads(r.content)) for r in self.requests]
        return [call for call in made if fn is None or call[0] == fn]

    def reload_schema(self) -> None:
        """``NOTIFY pgrst, 'reload schema'``: forget the cached signatures."""
        self._cache.clear()

    async def __call__(self, request: httpx.Request, fn: str) -> httpx.Response:
        self.requests.append(request)
        if self.round_trip:
            await asyncio.sleep(self.round_trip)
        headers = request.headers
        key = headers.get("apikey")
        if key not in ROLE_BY_KEY or headers.get("authorization") != f"Bearer {key}":
            return error_response(
                401, "PGRST301", "JWSError (CompactDecodeError Invalid number of parts)"
            )
        schema = headers.get("content-profile", self.exposed[0])
        for header in ("accept-profile", "content-profile"):
            if headers.get(header, schema) not in self.exposed:
                return error_response(
                    406,
                    "PGRST106",
                    f"The schema must be one of the following: {', '.join(self.exposed)}",
                )
        if headers.get("content-type") != "application/json":
            return error_response(415, "PGRST102", "Content-Type not acceptable")
        try:
            args = json.loads(request.content or b"{}")
        except ValueError:
            return error_response(400, "PGRST102", "Empty or invalid json")
        if not isinstance(args, dict):
            return error_response(400, "PGRST102", "Expected a JSON object of named arguments")
        role = ROLE_BY_KEY[key]
        async with self.pool.connection() as conn:
            signature = await self._signature(conn, schema, fn)
            if (
                signature is None
                or not set(args) <= set(signature[1])
                or not set(signature[1][: signature[3]]) <= set(args)
            ):
                listed = ", ".join(sorted(args))
                return error_response(
                    404,
                    "PGRST202",
                    f"Could not find the function {schema}.{fn}({listed}) in the schema cache",
                    f"Searched for the function {schema}.{fn} with parameters {listed} or with"
                    " a single unnamed json/jsonb parameter, but no matches were found in the"
                    " schema cache.",
                )
            returns_set, names, types, _ = signature
            given = [(n, t) for n, t in zip(names, types, strict=False) if n in args]
            query = self._query(schema, fn, given)
            try:
                async with conn.transaction():
                    await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
                    rows = await (await conn.execute(query, (json.dumps(args),))).fetchall()
            except psycopg.Error as exc:
                diag = exc.diag
                return error_response(
                    postgrest_status(exc, role),
                    exc.sqlstate or "XX000",
                    diag.message_primary or str(exc),
                    diag.message_detail,
                    diag.message_hint,
                )
        # Postgres' own JSON text, as PostgREST sends it (no re-encoding on the way)
        texts = [row[0] for row in rows]
        if returns_set:
            body = "[" + ",".join(texts) + "]"
        else:
            body = texts[0] if texts and texts[0] is not None else "null"
        return httpx.Response(200, content=body.encode(), headers=_JSON)

    async def _signature(
        self, conn: psycopg.AsyncConnection[Any], schema: str, fn: str
    ) -> tuple[bool, list[str], list[str], int] | None:
        if (schema, fn) not in self._cache:
            row = await (await conn.execute(_SIGNATURE, (schema, fn))).fetchone()
            self._cache[(schema, fn)] = None if row is None else (row[0], row[1], row[2], row[3])
        return self._cache[(schema, fn)]

    @staticmethod
    def _query(schema: str, fn: str, given: list[tuple[str, str]]) -> sql.Composed:
        # like PostgREST: the named arguments taken from the JSON body by jsonb_to_record
        call = sql.SQL(", ").join(
            sql.SQL("{} := x.{}").format(sql.Identifier(n), sql.Identifier(n)) for n, _ in given
        )
        if not given:
            return sql.SQL(
                "SELECT to_jsonb(r)::text FROM {}.{}() r WHERE %s::text IS NOT NULL"
            ).format(sql.Identifier(schema), sql.Identifier(fn))
        return sql.SQL(
            "SELECT to_jsonb(r)::text FROM jsonb_to_record(%s::jsonb) AS x({columns}),"
            " LATERAL {schema}.{fn}({call}) r"
        ).format(
            columns=sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in given
            ),
            schema=sql.Identifier(schema),
            fn=sql.Identifier(fn),
            call=call,
        )


_JSON = {"content-type": "application/json; charset=utf-8"}


@asynccontextmanager
async def postgrest_emulation(
    url: str, *, exposed: Iterable[str] = EXPOSED
) -> AsyncIterator[tuple[PostgrestEmulation, respx.MockRouter]]:
    """respx routes for ``{BASE}/rest/v1/rpc/<fn>`` served on the database at ``url``."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
    )
    await pool.open()
    emulation = PostgrestEmulation(pool, exposed)
    try:
        with respx.mock(assert_all_called=False) as router:
            router.post(url__regex=rf"^{BASE}/rest/v1/rpc/(?P<fn>\w+)$").mock(side_effect=emulation)
            yield emulation, router
    finally:
        await pool.close()
