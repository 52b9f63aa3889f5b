"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol on a pipe, as
``.ci/docs_check.sh`` drives it over a socket: no port, no extra package (``--remote-debugging-pipe``:
JSON messages ended by a NUL byte, ours on its fd 3, its on fd 4).

It records what a page does wrong (an uncaught exception, a console error, a failed request, an
HTTP error) in :attr:`Browser.problems`, and takes screenshots, of the page or of one element.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["Browser", "chromium"]


def chromium() -> str | None:
    """The Chromium binary, or None where it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page (attached in flat mode); :meth:`close` ends it."""

    def __init__(self, width: int = 1280, height: int = 1000):
        binary = chromium()
        if binary is None:
            raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
        self._profile = tempfile.mkdtemp(prefix="dashboard-chromium-")
        to_browser, self._out = os.pipe()          # we write, it reads on fd 3
        self._in, from_browser = os.pipe()         # it writes on fd 4, we read
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
                f"--window-size={width},{height}", "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
                "about:blank"]
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser} {to_browser}<&- {from_browser}>&-', *args],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._ids = iter(range(1, 1 << 30))
        self._answers: dict[int, Any] = {}
        self._cond = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        targets = self.call("Target.getTargets", session=False)["targetInfos"]
        page = next(t["targetId"] for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", session=False, targetId=page, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._answers[-1] = "closed"
                    self._cond.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                with self._cond:
                    if "id" in message:
                        self._answers[message["id"]] = message
                    else:
                        self.events.append(message)
                        self._note(message)
                    self._cond.notify_all()

    def _note(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.problems.append(f"uncaught exception: {details.get('text')} "
                                 f"{details.get('exception', {}).get('description', '')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.problems.append("console error: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.problems.append(f"console error: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self.problems.append(f"a request failed: {params.get('errorText')}")
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            self.problems.append(f"{params['response']['status']} for {params['response']['url']}")

    def call(self, method: str, session: bool = True, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one command (to the page unless ``session`` is False) and return its result."""
        n = next(self._ids)
        message: dict[str, Any] = {"id": n, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while n not in self._answers:
                if -1 in self._answers:
                    raise RuntimeError(f"{method}: chromium closed its pipe")
                if not self._cond.wait(deadline - time.monotonic()):
                    raise TimeoutError(f"{method}: no answer from chromium in {timeout} s")
            answer = self._answers.pop(n)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def navigate(self, url: str, timeout: float = 30.0) -> None:
        """Open ``url`` and wait for its load event."""
        with self._cond:
            seen = len(self.events)
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any(e.get("method") == "Page.loadEventFired" for e in self.events[seen:]):
                if not self._cond.wait(deadline - time.monotonic()):
                    raise TimeoutError(f"{url}: no load event in {timeout} s")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript ``expression`` in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15.0, poll: float = 0.1) -> Any:
        """Evaluate ``expression`` until it is truthy; its value (``TimeoutError`` after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true within {timeout} s: {expression}")
            time.sleep(poll)

    def screenshot(self, path: Path, selector: str | None = None) -> bytes:
        """A PNG of the page (or of the element ``selector`` finds), written to ``path``; its bytes."""
        params: dict[str, Any] = {"format": "png"}
        if selector is not None:
            box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                                f".getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }})()")
            params["clip"] = {"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1}
        else:
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        Path(path).write_bytes(data)
        return data

    def close(self) -> None:
        """End Chromium (never raises)."""
        try:
            os.close(self._out)
        except OSError:
            pass
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        try:
            os.close(self._in)
        except OSError:
            pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
