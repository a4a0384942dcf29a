#!/usr/bin/env python
"""The example shop's manage.py: ``python manage.py test`` (SHOP_DATABASE_URL names the
Postgres database; drainpipe's SQL is applied by the test itself)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
