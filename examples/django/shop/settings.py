"""A minimal Django project on Postgres (psycopg 3) using drainpipe's sync twin.

``SHOP_DATABASE_URL`` names the database (default: a local ``shop`` database). Tests run
on that same database (``TEST["NAME"]`` with ``--keepdb``), so the one the suite clones,
with drainpipe's SQL in it, is used as it is.
"""

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ.get("SHOP_DATABASE_URL", "postgresql://postgres@127.0.0.1/shop"))

SECRET_KEY = "example-only-not-secret"  # noqa: S105 - an example project
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
USE_TZ = True
ROOT_URLCONF = "shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "orders"]
MIDDLEWARE = ["drainpipe.contrib.django.IdempotencyMiddleware"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", "shop"),
        "USER": _db.get("user", "postgres"),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", "127.0.0.1"),
        "PORT": _db.get("port", "5432"),
        "TEST": {"NAME": _db.get("dbname", "shop")},
    }
}
# the middleware's options (those of drainpipe.sync.Idempotency); its keys live on a
# pool of their own, built from DATABASES["default"] unless "db" says otherwise
# The default scope is the signed-in user, else the session; this shop has neither (no auth
# or session apps), so its anonymous callers share one scope: anyone who sends another's
# key, path and body gets that answer. With django.contrib.auth, drop "anonymous".
DRAINPIPE_IDEMPOTENCY = {"required": False, "anonymous": True}
