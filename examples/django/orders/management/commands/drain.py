"""``python manage.py drain receipts [--budget 50]``: run the receipts due now and exit
(call it from cron, a scheduler or a loop in a worker container)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orders.jobs import jobs, send_receipt

HANDLERS = {"receipts": send_receipt}


class Command(BaseCommand):
    help = "Drain a drainpipe queue: run its ready jobs, then exit"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", choices=sorted(HANDLERS))
        parser.add_argument("--budget", type=float, default=50.0, help="seconds to keep claiming")

    def handle(self, *args: Any, **options: Any) -> None:
        jobs().run_schedules()
        report = jobs().drain(
            options["queue"], HANDLERS[options["queue"]], budget=options["budget"]
        )
        self.stdout.write(f"succeeded={report.succeeded} failed={report.failed}")
