"""Headless Chromium for the report pages' tests: Debian's chromium, driven by Playwright.

Playwright only drives the browser here (`executable_path`); it never downloads one (no
`playwright install`). Each launch gets a new empty profile from Playwright (a fresh
user-data-dir), and the flags below keep Chromium from reaching for Google's services, which this
closed network refuses. Every request a page makes is recorded, so a test can assert that an
opened report fetched nothing but itself. Screenshots go to tests/artifacts/ (gitignored).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MALLOY_EVALS_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               "--disable-quic", "--disable-default-apps", "--disable-extensions"]
ARTIFACTS = KIT / "tests" / "artifacts"


def browser_missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return (f"{CHROMIUM} is missing: install Debian's Chromium (apt-get install chromium; "
                ".ci/run does)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: it is in the dev extra (pip install -e .[dev])"
    return None


@contextmanager
def launched() -> Iterator[Any]:
    """One headless Chromium for a test session."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Visit:
    """An opened page and everything it asked the network or the console for."""

    page: Any
    context: Any
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.context.close()


def visit(browser: Any, path: Path, *, fragment: str | None = None, javascript: bool = True,
          width: int = 1200, height: int = 900) -> Visit:
    """Open a local page as a person would (file://), recording every request it makes."""
    context = browser.new_context(java_script_enabled=javascript,
                                  viewport={"width": width, "height": height})
    v = Visit(page=None, context=context)
    context.on("request", lambda r: v.requests.append(r.url))
    # Nothing may leave the machine even if a page tried: record it above, refuse it here.
    context.route("**/*", lambda route: route.continue_()
                  if route.request.url.startswith(("file:", "data:")) else route.abort())
    page = context.new_page()
    page.on("console", lambda m: v.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: v.page_errors.append(str(e)))
    url = path.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    page.goto(url)
    v.page = page
    return v


def screenshot(v: Visit, name: str) -> Path:
    """A full-page screenshot kept under tests/artifacts/report/ for a person to look at."""
    target = ARTIFACTS / "report" / f"{name}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    v.page.screenshot(path=str(target), full_page=True)
    return target
