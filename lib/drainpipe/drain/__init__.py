"""The drain route a cron caller hits (:mod:`.route`), what it answers when it cannot work
(:mod:`.unavailable`), and the loop that plays that caller locally (:mod:`.dev_drain`)."""

from .dev_drain import DevDrain, dev_drain, dev_drain_secret
from .route import DrainRoute, MonitorRequest, RequestURL
from .unavailable import DrainUnavailable, missing_sql

__all__ = [
    "DevDrain",
    "DrainRoute",
    "DrainUnavailable",
    "MonitorRequest",
    "RequestURL",
    "dev_drain",
    "dev_drain_secret",
    "missing_sql",
]
