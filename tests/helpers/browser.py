"""Headless Chromium for page tests (Debian's ``chromium`` + ``chromium-driver``, which
.ci/run installs), driven through selenium; ``--no-sandbox`` because CI runs as root."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

BINARIES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> tuple[str, str] | None:
    """(browser, driver) paths, or None when either is missing."""
    browser = next((p for p in map(shutil.which, BINARIES) if p), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium webdriver that records the console; skips when none is installed."""
    found = find_chromium()
    if found is None:
        pytest.skip("headless Chromium not found: apt-get install -y chromium chromium-driver (.ci/run does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(found[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """Messages the page logged at SEVERE level (script errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
