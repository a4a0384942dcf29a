"""Principals and the bearer-token authorizer shared by the management API and agent inbox."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from drainpipe import Principal, bearer_tokens

ADMIN_TOKEN = "admin-token-0123456789"
VIEWER_TOKEN = "viewer-token-0123456789"


@dataclass
class FakeRequest:
    """Only the ``headers`` mapping an authorizer reads; the HTTP apps pass Starlette's."""

    headers: dict[str, str] = field(default_factory=dict)


def request_with(authorization: str | None) -> FakeRequest:
    return FakeRequest({} if authorization is None else {"authorization": authorization})


def test_bearer_tokens_answer_the_token_s_principal() -> None:
    admin, viewer = Principal("ops@example.com", "admin"), Principal("intern")
    authorize = bearer_tokens({ADMIN_TOKEN: admin, VIEWER_TOKEN: viewer})
    assert authorize(request_with(f"Bearer {ADMIN_TOKEN}")) is admin
    assert authorize(request_with(f"bearer {VIEWER_TOKEN}")) is viewer
    assert viewer.role == "viewer" and not viewer.is_admin and admin.is_admin


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        f"Basic {ADMIN_TOKEN}",
        f"Bearer {ADMIN_TOKEN}x",
        "Bearer \ud800",
    ],
)
def test_missing_malformed_or_unknown_tokens_are_no_principal(header: str | None) -> None:
    authorize = bearer_tokens({ADMIN_TOKEN: Principal("ops", "admin")})
    assert authorize(request_with(header)) is None


def test_the_authorizer_does_not_keep_tokens_in_clear() -> None:
    authorize = bearer_tokens({ADMIN_TOKEN: Principal("ops", "admin")})
    cells = [cell.cell_contents for cell in authorize.__closure__ or ()]
    assert ADMIN_TOKEN not in repr(cells)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"actor": ""},
        {"actor": "x" * 201},
        {"actor": "ops", "role": "owner"},
        {"actor": "ops", "inboxes": "inbox_1"},
        {"actor": "ops", "inboxes": [1]},
    ],
)
def test_invalid_principals_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="Principal"):
        Principal(**kwargs)  # type: ignore[arg-type]


def test_inbox_scope() -> None:
    assert Principal("agent").may_use_inbox("inb_1")
    scoped = Principal("agent", inboxes=["inb_1"])
    assert scoped.may_use_inbox("inb_1") and not scoped.may_use_inbox("inb_2")
    assert scoped.inboxes == frozenset({"inb_1"})


def test_bearer_tokens_refuse_short_tokens_and_non_principals() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        bearer_tokens({"short": Principal("ops")})
    with pytest.raises(ValueError, match="at least one"):
        bearer_tokens({})
    with pytest.raises(TypeError):
        bearer_tokens({ADMIN_TOKEN: "admin"})  # type: ignore[dict-item]
