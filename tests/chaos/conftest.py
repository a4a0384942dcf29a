from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.chaos.cluster import ThrowawayCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    """A cluster of the test's own, on a free port: the one the chaos run crashes."""
    made = ThrowawayCluster().init()
    made.start()
    # the pool's reconnect warnings during the outage are expected, not news
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    try:
        yield made
    finally:
        made.remove()
