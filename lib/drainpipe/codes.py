"""Safe codes: short, stable strings that say why a job is where it is.

A code matches ``^[A-Z][A-Z0-9_]{0,63}$`` and is shown to operators in place of error text
(which may hold personal data). The built-in ones are constants here; a handler picks its
own by raising an exception whose ``code`` attribute is such a string, or with
:class:`Skip`, :class:`Discard` and :class:`~drainpipe.errors.Retry`.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = [
    "BUILT_IN",
    "CANCELLED",
    "DEADLINE_PASSED",
    "EVENT_EXPIRED",
    "HANDLER_ERROR",
    "LEASE_EXPIRED",
    "MAX_ATTEMPTS",
    "PAYLOAD_INVALID",
    "PAYLOAD_UNREADABLE",
    "REPLAY_BLOCKED",
    "REPLAY_RULES",
    "RETRY",
    "Discard",
    "Skip",
    "code_of",
    "valid_code",
]

#: the handler raised (an exception without a valid ``code``)
HANDLER_ERROR: Final = "HANDLER_ERROR"
#: the stored payload failed validation in the worker
PAYLOAD_INVALID: Final = "PAYLOAD_INVALID"
#: the stored payload could not be decrypted
PAYLOAD_UNREADABLE: Final = "PAYLOAD_UNREADABLE"
#: the attempt's lease ran out before it settled (the worker died or stalled)
LEASE_EXPIRED: Final = "LEASE_EXPIRED"
#: a dead job: its attempts are spent (the last attempt keeps its own code)
MAX_ATTEMPTS: Final = "MAX_ATTEMPTS"
#: a dead job: its policy's attempt window closed
DEADLINE_PASSED: Final = "DEADLINE_PASSED"
#: an operator cancelled the job
CANCELLED: Final = "CANCELLED"
#: ``Retry`` raised without a code of its own
RETRY: Final = "RETRY"

#: a replay refused: the job's source event is older than its queue's ``replay_window``
#: (counted from when the first job of its replay lineage was enqueued)
EVENT_EXPIRED: Final = "EVENT_EXPIRED"
#: a replay refused: the queue's policy has ``replayable=False``
REPLAY_BLOCKED: Final = "REPLAY_BLOCKED"
#: the codes a queue policy's replay rules refuse a replay with (409, kind ``conflict``)
REPLAY_RULES: Final[frozenset[str]] = frozenset({EVENT_EXPIRED, REPLAY_BLOCKED})

BUILT_IN: Final[frozenset[str]] = frozenset(
    {
        HANDLER_ERROR,
        PAYLOAD_INVALID,
        PAYLOAD_UNREADABLE,
        LEASE_EXPIRED,
        MAX_ATTEMPTS,
        DEADLINE_PASSED,
        CANCELLED,
        RETRY,
    }
)

# fullmatch, and \Z rather than $: "$" would accept a trailing newline
_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}\Z")


def valid_code(code: Any) -> bool:
    """True for a string matching ``^[A-Z][A-Z0-9_]{0,63}$`` exactly (no trailing newline)."""
    return isinstance(code, str) and _CODE.fullmatch(code) is not None


def _checked(code: Any, what: str) -> str:
    if not valid_code(code):
        raise ValueError(
            f"{what}(code) needs a code matching ^[A-Z][A-Z0-9_]{{0,63}}$, not {code!r}"
        )
    return str(code)


def code_of(error: BaseException | Any, default: str = HANDLER_ERROR) -> str:
    """The code to record for ``error``: its ``code`` attribute when that is a valid code,
    else ``default`` (an invalid code attribute is ignored)."""
    code = getattr(error, "code", None)
    return str(code) if valid_code(code) else default


class Skip(Exception):
    """Raise from a handler: the job succeeds without doing its work, on purpose (state
    ``succeeded``, the attempt's outcome ``skipped``, ``last_code=code``).

    A code that is not valid is the handler's bug: ``ValueError`` here, so the worker
    records ``HANDLER_ERROR`` and reports it to ``on_error``."""

    def __init__(self, code: str, message: str | None = None) -> None:
        self.code = _checked(code, "Skip")
        super().__init__(message or f"Skipped: {self.code}")


class Discard(Exception):
    """Raise from a handler: the job is dead now, whatever attempts are left (outcome
    ``discarded``, ``last_code=code``). A decision, not an error: not reported to
    ``on_error`` (like ``Retry``)."""

    def __init__(self, code: str, message: str | None = None) -> None:
        self.code = _checked(code, "Discard")
        super().__init__(message or f"Discarded: {self.code}")


#: a run whose n-th step has another name than the one recorded: the job ends dead
STEP_MISMATCH = "STEP_MISMATCH"


class Suspend(BaseException):
    """Raised by ``job.sleep``, ``job.wait_for`` and ``job.join`` (and a step under a
    spent budget) once the job is suspended: its lease is released already and the run
    ends here. A ``BaseException``, so an ``except Exception`` in a handler lets it pass;
    the runner catches it. A handler must not swallow it."""

    def __init__(self, waiting_for: str | None = None, *, budget: bool = False) -> None:
        self.waiting_for = waiting_for
        #: suspended because the run's budget is nearly spent: the run claims no more
        self.budget = budget
        super().__init__(f"Suspended: waiting for {waiting_for or 'its turn'}")
