"""A real headless Chromium driving the console: the browser, signing in, explicit waits on
the DOM (never sleeps), screenshots into ``$CRONLOG_ARTIFACTS_DIR`` (default
``.cache/artifacts/console/``). The ``driver`` fixture (``conftest.py``) opens one.

Needs Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``,
``/usr/bin/chromedriver``): missing, the tests fail saying so.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def artifacts() -> Path:
    out = Path(os.environ.get("CRONLOG_ARTIFACTS_DIR") or ROOT / ".cache/artifacts/console")
    out.mkdir(parents=True, exist_ok=True)
    return out


def screenshot(driver: WebDriver, name: str) -> Path:
    path = artifacts() / name
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    print(f"screenshot: {path}")
    return path


def chromium() -> WebDriver:
    """Start a headless Chromium (Debian's) driven through its chromedriver; quit it after."""
    driver_path = Path(shutil.which("chromedriver") or CHROMEDRIVER)
    if not CHROMIUM.exists() or not driver_path.exists():
        pytest.fail(
            "the console's browser tests need Debian's chromium and its driver: "
            "apt-get install chromium chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(str(driver_path)))


def base(api: httpx.Client) -> str:
    return str(api.base_url).rstrip("/")


def sign_in(driver: WebDriver, api: httpx.Client, token: str) -> None:
    """Sign in through the login form; wait for the jobs page."""
    driver.get(base(api) + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "sign-in").click()
    WebDriverWait(driver, 20).until(lambda d: d.current_url == base(api) + "/")
    assert driver.find_element(By.ID, "jobs")


def mark(driver: WebDriver) -> None:
    """Leave a marker in the page's window: a reload would lose it."""
    driver.execute_script("window.__cronlogNoReload = true;")


def not_reloaded(driver: WebDriver) -> bool:
    return bool(driver.execute_script("return window.__cronlogNoReload === true;"))


def css(driver: WebDriver, selector: str) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def until(driver: WebDriver, probe: Any, timeout: float, what: str) -> Any:
    """Wait for ``probe`` to be truthy; an element htmx swapped out meanwhile is looked up again."""
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout, 0.2, ignored).until(probe, what)


def text(driver: WebDriver, selector: str) -> str | None:
    """The text of the element ``selector`` names, read in one step (a swap cannot split it)."""
    got = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", selector
    )
    return None if got is None else str(got)


def click(driver: WebDriver, selector: str) -> None:
    """Click the element ``selector`` names; if htmx swapped it out meanwhile, the new one."""
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector).click() or True, 20, selector)
