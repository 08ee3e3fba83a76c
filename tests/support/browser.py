"""Headless Chromium (Debian's /usr/bin/chromium) driven over the Chrome DevTools protocol.

No WebDriver and no browser download: Chromium is started with ``--remote-debugging-port=0``
and one page target is driven through a websocket (``websockets``' sync client). Input goes
through ``Input.insertText`` so React-controlled fields see real input events.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# The closed network refuses Chromium's background connections; these flags stop them.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1000",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]


class BrowserError(AssertionError):
    """A page did not reach the expected state; the message says what was on it."""


def ensure_chromium() -> None:
    """Install Debian's chromium when missing (as root), else fail with the command to run."""
    result = subprocess.run(["bash", str(REPO / "scripts" / "browser.sh")], capture_output=True, text=True)
    if result.returncode != 0 or not CHROMIUM.exists():
        raise RuntimeError(f"Chromium is required for the UI test:\n{result.stdout}{result.stderr}")


class Browser:
    """One headless Chromium with one page; ``close()`` ends its whole process group."""

    def __init__(self, width: int = 1440, height: int = 1000) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="reprocess-chromium-"))
        self.log = self.profile.with_suffix(".log")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(CHROMIUM), *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._ids = itertools.count(1)
        port = self._devtools_port()
        page = self._page_target(port)
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=20)
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _devtools_port(self, timeout: float = 30) -> int:
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            if active.exists() and active.read_text().strip():
                return int(active.read_text().split()[0])
            time.sleep(0.1)
        raise RuntimeError(f"chromium wrote no DevToolsActivePort within {timeout}s: {self.log.read_text()[-3000:]}")

    @staticmethod
    def _page_target(port: int) -> dict[str, Any]:
        for _ in range(50):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                pages = [t for t in json.load(resp) if t.get("type") == "page"]
            if pages:
                return pages[0]
            time.sleep(0.1)
        raise RuntimeError("chromium has no page target")

    # ------------------------------------------------------------------ protocol
    def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == msg_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def eval(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JS error in {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    # ------------------------------------------------------------------ page helpers
    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def text(self) -> str:
        return self.eval("document.body ? document.body.innerText : ''") or ""

    def url(self) -> str:
        return self.eval("location.href")

    def _try_eval(self, expression: str) -> Any:
        """:meth:`eval`, or None while the page is navigating (its context is gone for a moment)."""
        try:
            return self.eval(expression)
        except RuntimeError:
            return None

    def wait_for(self, expression: str, what: str, timeout: float = 45) -> None:
        """Poll a JS expression until it is truthy; fail with the page's text otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = self._try_eval(f"!!({expression})")
            if ok:
                return
            time.sleep(0.25)
        raise BrowserError(f"timed out after {timeout}s waiting for {what} on {self.url()}:\n{self.text()[:3000]}")

    def wait_for_text(self, *needles: str, timeout: float = 45) -> str:
        checks = " && ".join(f"document.body.innerText.includes({json.dumps(n)})" for n in needles)
        self.wait_for(f"document.body && {checks}", f"text {needles}", timeout)
        return self.text()

    def type_into(self, selector: str, value: str) -> None:
        self.wait_for(f"document.querySelector({json.dumps(selector)})", selector)
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", text=value)

    def click(self, selector: str, text: str | None = None) -> None:
        """Click (real mouse events) the first enabled ``selector`` whose text is ``text``."""
        find = (
            f"[...document.querySelectorAll({json.dumps(selector)})]"
            f".find(e => !e.disabled && e.getClientRects().length"
            f" && ({json.dumps(text)} === null || e.innerText.trim() === {json.dumps(text)}))"
        )
        what = f"{selector} {text or ''}".strip()
        self.wait_for(find, what)
        # Its centre, when nothing covers it there. A page still rendering moves its elements: a
        # click at where the element was lands on what took its place (seen under load: the DAG's
        # tabs moved down as its header filled in, and the click hit the chart below them).
        centre = (
            f"(() => {{ const e = {find}; if (!e) return null; e.scrollIntoView({{block: 'center'}});"
            " const r = e.getBoundingClientRect(), x = r.x + r.width / 2, y = r.y + r.height / 2;"
            " const hit = document.elementFromPoint(x, y); return hit && e.contains(hit) ? [x, y] : null; })()"
        )
        deadline, last = time.monotonic() + 45, None
        while (point := self._try_eval(centre)) is None or point != last:  # the same place twice, 0.2 s apart
            if time.monotonic() > deadline:
                raise BrowserError(f"{what} never held still where it can be clicked on {self.url()}")
            last = point
            time.sleep(0.2)
        x, y = point
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def settle(self, timeout: float = 5) -> None:
        """Wait for running CSS animations (accordions, dialogs) to finish; best effort."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.eval("document.getAnimations().filter(a => a.playState === 'running').length"):
                return
            time.sleep(0.1)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        self.settle()
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """End Chromium's process group and wait until it is gone (its crashpad helpers follow)."""
        try:
            self.ws.close()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while _group_alive(self.proc.pid) and time.monotonic() < deadline:
                self.proc.poll()  # reap the browser process itself
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
