"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) against the Job Inbox under
a real uvicorn server on a free loopback port, served from its own thread and event loop so
selenium's blocking calls never stall it. Jobs are made on that loop too (:meth:`run`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


class ServedApp:
    """``app`` under uvicorn in a thread of its own; ``url`` is where it answers."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan="off",
            log_level="warning",
            ws="none",
            interface="asgi3",
        )
        self.server = uvicorn.Server(config)
        self.task: Future[None] = asyncio.run_coroutine_threadsafe(self.server.serve(), self.loop)
        self.run(self._started())
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def _started(self) -> None:
        async with asyncio.timeout(10):
            while not self.server.started:
                await asyncio.sleep(0.01)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.task.result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def chromium_driver() -> Iterator[Any]:
    """One headless Chromium for a module's tests (each test opens its own origin)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs chromium and chromium-driver (.ci/run installs them)")
        pytest.skip("needs chromium and chromium-driver: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    # the path given: selenium's own driver manager would try to download one
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
