"""The Job Inbox (docs/reference.md §10): the management API and its admin page (:mod:`.management_app`,
:mod:`.page`), signed cursors (:mod:`.cursors`) and the Python client (:mod:`.client`)."""

from __future__ import annotations
