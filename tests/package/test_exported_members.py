"""The public surface: every name of docs/reference.md (plus our documented extensions)."""

from __future__ import annotations

import drainpipe

CONTRACT = {
    # docs/reference.md §1-7
    "DrainpipeError",
    "Jobs",
    "Queue",
    "Job",
    "DeadJob",
    "QueueStats",
    "WorkReport",
    "JobContext",
    "Retry",
    "ScheduleInfo",
    "ScheduleDef",
    "EnsureResult",
    "assert_cron",
    "next_cron_run",
    "dev_drain",
    "DevDrain",
    "dev_drain_secret",
    "Idempotency",
    "Begin",
    "with_lease",
    "lease",
    "WebhookInbox",
    "Stored",
    "InboxEntry",
    "install",
    "QueueBackend",
    "testing",
    # docs/reference.md §9
    "QueuePolicy",
    "Rate",
    "Keyring",
    # docs/reference.md §8
    "JobRecord",
    "Attempt",
    "JobPage",
    "Skip",
    "Discard",
    # docs/reference.md §7 (wave 2)
    "PostgrestBackend",
    # docs/reference.md §10-11
    "ManagementClient",
    "AgentInboxes",
    "Principal",
    "bearer_tokens",
    # docs/reference.md §12
    "sync",
    # docs/reference.md §13
    "Suspend",
    "Step",
    "ChildOutcome",
}
EXTENSIONS = {
    "Actor",
    "ReplayReport",
    "DrainRoute",
    "Lease",
    "LeaseOutcome",
    "WebhookMessage",
    "verify",
    "Position",
    "codes",
}
MODULES = {"testing", "codes", "sync"}


def test_all_is_the_contract_plus_documented_extensions() -> None:
    assert set(drainpipe.__all__) == CONTRACT | EXTENSIONS
    assert drainpipe.__all__ == sorted(drainpipe.__all__)


def test_every_exported_name_resolves() -> None:
    for name in drainpipe.__all__:
        value = getattr(drainpipe, name)
        assert value is not None, name
        if name in MODULES:
            assert value.__name__ == f"drainpipe.{name}", name
        else:
            assert getattr(value, "__module__", "").startswith("drainpipe"), name


def test_install_is_the_function_not_a_module() -> None:
    # importing the submodule must not shadow the function of the same package
    import drainpipe.sqlmodules

    assert callable(drainpipe.install) and drainpipe.install.__name__ == "install"
    assert callable(drainpipe.testing.check_queue_backend)


def test_the_sync_twin_exports_what_section_12_names() -> None:
    from drainpipe import sync

    assert drainpipe.sync is sync
    for name in (
        *("Jobs", "Queue", "Idempotency", "with_lease", "lease", "Lease", "WebhookInbox"),
        "ManagementClient",
    ):
        assert name in sync.__all__, name
        assert getattr(sync, name).__module__.startswith("drainpipe.sync"), name
    for method in ("close", "__enter__", "__exit__"):
        for cls in (sync.Jobs, sync.Idempotency, sync.WebhookInbox):
            assert callable(getattr(cls, method)), (cls, method)
