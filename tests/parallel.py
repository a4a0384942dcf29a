"""Which tests stay on one worker when the suite runs on several (``./scripts/test`` with no
path runs ``pytest -n 2 --dist loadgroup``; docs/testing.md, "Running drainpipe's own suite").

pytest-xdist hands tests to its workers one at a time, so two tests of one module may run in
two processes at once. That is safe for what ``tests/conftest.py`` makes per test (a clone of
the template database under a random name; the template itself is built once, under an
advisory lock, whichever worker comes first). It is not for:

- a resource of the machine that is not made per test: the pg_cron cluster on 5433 (pg_cron
  runs jobs in one database, where every pg_cron test installs the jobs module), the
  embedded server of ``tests/db/test_db_errors.py`` (a fixed data folder), chromium;
- the throwaway clusters, failover formation and PgBouncers of tests/chaos: one at a time,
  so two crash-and-restart runs do not starve each other's deadlines on a 2-core machine;
- a module whose tests share an expensive module-scoped fixture (the baseline's files,
  a cluster): split across workers, each worker would build it again.

Each such test gets an ``xdist_group`` mark; ``--dist loadgroup`` runs a group's tests on
one worker, in file order. Without xdist the marks change nothing.
"""

from __future__ import annotations

import pytest

# a test using one of these fixtures uses that resource (the fixtures' own docstrings say what)
RESOURCE_FIXTURES = {
    "cron_url": "pg_cron",
    "cron_db": "pg_cron",
    "password_server": "embedded-auth-server",
    "browser": "chromium",
}
RESOURCE_PATHS = {"tests/chaos/": "chaos"}
SHARED_SCOPES = ("module", "class", "package")


def group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test, or None when it may run on any worker."""
    if item.get_closest_marker("pg_cron") is not None:
        return "pg_cron"
    names = getattr(item, "fixturenames", ())
    for fixture, group in RESOURCE_FIXTURES.items():
        if fixture in names:
            return group
    path = item.nodeid.split("::", 1)[0]
    for prefix, group in RESOURCE_PATHS.items():
        if path.startswith(prefix):
            return group
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for definitions in info.name2fixturedefs.values():
        # baseid "" is a plugin's fixture (pytest-asyncio's loops): never shared state of ours
        if any(d.scope in SHARED_SCOPES and d.baseid for d in definitions):
            return "module:" + path
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (group := group_of(item)):
            item.add_marker(pytest.mark.xdist_group(group))
