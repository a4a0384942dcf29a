"""Schedules (placeholder until the schedules issue lands)."""

from __future__ import annotations


class ScheduleMixin:
    """Schedule methods of :class:`drainpipe.Jobs`."""
