"""Headless Chromium driven over the DevTools protocol, on a pipe.

``chromium --remote-debugging-pipe`` reads DevTools commands on its fd 3 and
writes answers and events on its fd 4, each message JSON ended by a NUL
byte. That is all a test needs to open a page, evaluate script in it and
take a screenshot: no port, no driver binary to keep in step with the
browser (as chromedriver for selenium must be), no package from PyPI.
The browser is Debian's ``chromium`` (``make browser``); nothing is
downloaded at run time.

    with Browser() as b:
        b.open("file:///tmp/report.html")
        b.evaluate("document.title")
        b.screenshot("shot.png")
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The browser to drive: ``CODEX_SIDECAR_TEST_CHROMIUM``, else the first
    of :data:`CANDIDATES` on PATH."""
    given = os.environ.get("CODEX_SIDECAR_TEST_CHROMIUM")
    if given:
        return given
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(Exception):
    pass


class Browser:
    """One headless Chromium with one page; a context manager."""

    def __init__(self, binary: str | None = None, *, width: int = 1400, height: int = 1000, timeout: float = 60.0) -> None:
        self.binary = binary or find_chromium()
        if not self.binary:
            raise BrowserError("no chromium found: run `make browser` (Debian's chromium package)")
        self.width, self.height, self.timeout = width, height, timeout
        self._id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        self.session: str | None = None

    def __enter__(self) -> Browser:
        self._profile = tempfile.mkdtemp(prefix="codex-sidecar-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds() -> None:  # in the child: the pipes on fds 3 and 4 (the only ones inherited: os.pipe is close-on-exec)
            read, write = os.dup(to_browser_r), os.dup(from_browser_w)  # off 3 and 4 first: either may be one
            os.dup2(read, 3)
            os.dup2(write, 4)

        args = [
            self.binary,
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={self._profile}",
            f"--window-size={self.width},{self.height}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(args, preexec_fn=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None if os.environ.get("CODEX_SIDECAR_CHROMIUM_LOG") else subprocess.DEVNULL, close_fds=False)  # noqa: S603
        os.close(to_browser_r)
        os.close(from_browser_w)
        try:
            targets = self.send("Target.getTargets", session=False)["targetInfos"]
            page = next(t["targetId"] for t in targets if t["type"] == "page")
            self.session = self.send("Target.attachToTarget", {"targetId": page, "flatten": True}, session=False)["sessionId"]
            self.send("Page.enable")
            self.send("Runtime.enable")
            self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send("Browser.close", session=False)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    # ------------------------------------------------------------ protocol

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError("chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> dict[str, Any]:
        """Send one command and wait for its answer (events meanwhile are kept)."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data) :]
        deadline = time.monotonic() + self.timeout
        while True:
            got = self._read(deadline)
            if got.get("id") == self._id:
                if "error" in got:
                    raise BrowserError(f"{method}: {got['error']}")
                result: dict[str, Any] = got.get("result") or {}
                return result
            if "method" in got:
                self._events.append(got)

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            for k, e in enumerate(self._events):
                if e.get("method") == method:
                    del self._events[: k + 1]
                    return e
            self._events.append(self._read(deadline))

    # ------------------------------------------------------------- the page

    def open(self, url: str) -> float:
        """Navigate and wait for the load event; the seconds it took."""
        self._events.clear()
        started = time.monotonic()
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        return time.monotonic() - started

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (awaited when a promise)."""
        got = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in got:
            raise BrowserError(f"script failed: {got['exceptionDetails'].get('text')} {got['exceptionDetails'].get('exception', {}).get('description', '')}")
        return got.get("result", {}).get("value")

    def screenshot(self, path: str | os.PathLike[str], *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            height = int(self.evaluate("document.documentElement.scrollHeight"))
            params["clip"] = {"x": 0, "y": 0, "width": self.width, "height": min(height, 12000), "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", params)["data"]
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out
