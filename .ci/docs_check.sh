#!/usr/bin/env bash
# The docs site looked at in a real browser (issue 33): build docs/ (warnings as errors, every
# reference checked), serve it on 127.0.0.1 (a port the OS picks), open its main pages in
# headless Chromium through the DevTools protocol, and fail on a console error, an uncaught
# exception, a request that failed, a broken image, a stylesheet that did not load, or a search
# for "reset" that finds nothing. A screenshot of each page is kept in docs/_build/browser/.
#
# Idempotent: installs Chromium (Debian's `chromium`) and the docs extra only when missing.
# Runs in the active Python environment if it has the docs extra, else in .venv-docs.
# No network is needed once installed (the site loads nothing from outside the machine).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
fi

py=python3
if [ -n "${VIRTUAL_ENV:-}" ]; then py=python; fi
if ! "$py" -c 'import sphinx, myst_parser, furo, sphinxarg, websockets.sync.client' 2>/dev/null; then
  if [ ! -x .venv-docs/bin/python ]; then python3 -m venv .venv-docs; fi
  py=.venv-docs/bin/python
  if ! "$py" -c 'import sphinx, myst_parser, furo, sphinxarg, websockets.sync.client' 2>/dev/null; then
    "$py" -m pip install --upgrade pip >/dev/null
    "$py" -m pip install -e ".[docs]" "websockets>=14"
  fi
fi

site=docs/_build/html
shots=docs/_build/browser
rm -rf "$site" "$shots"
echo "+ $py -m sphinx -W -n --keep-going -b html docs $site"
"$py" -m sphinx -W -n --keep-going -q -b html docs "$site"
mkdir -p "$shots"

"$py" - "$site" "$shots" <<'PY'
"""Serve the built site and look at it in headless Chromium (DevTools protocol)."""
import base64
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from websockets.sync.client import connect

site, shots = sys.argv[1], sys.argv[2]
PAGES = ["index.html", "getting-started.html", "guides/gymnasium.html", "guides/serving.html",
         "guides/lifecycle.html", "guides/security.html", "guides/dashboard.html", "guides/performance.html", "deploying.html",
         "reference/api/index.html", "reference/api/dmrpc_gym.html", "reference/cli.html",
         "changelog.html"]


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
threading.Thread(target=httpd.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{httpd.server_address[1]}/"

profile = tempfile.mkdtemp(prefix="docs-chromium-")
browser = subprocess.Popen(
    ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
     "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--window-size=1280,900",
     "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", f"--user-data-dir={profile}",
     "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
try:
    deadline = time.monotonic() + 60
    port = None
    while port is None and time.monotonic() < deadline:
        line = browser.stderr.readline()
        if not line and browser.poll() is not None:
            sys.exit(f"chromium exited with status {browser.returncode}")
        match = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
        if match:
            port = int(match.group(1))
    if port is None:
        sys.exit("chromium did not open its DevTools port within 60 s")
    threading.Thread(target=lambda: [None for _ in browser.stderr], daemon=True).start()   # drain
    targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
    page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")

    with connect(page_ws, max_size=64 * 2**20, open_timeout=30) as ws:
        ids = iter(range(1, 10**9))
        events = []

        def call(method, **params):
            n = next(ids)
            ws.send(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                message = json.loads(ws.recv(timeout=60))
                if message.get("id") == n:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return message.get("result", {})
                events.append(message)

        def pump(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    events.append(json.loads(ws.recv(timeout=max(0.01, end - time.monotonic()))))
                except TimeoutError:
                    break

        def evaluate(expression):
            result = call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
            if "exceptionDetails" in result:
                raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
            return result["result"].get("value")

        for domain in ("Page", "Runtime", "Log", "Network"):
            call(f"{domain}.enable")
        problems = []

        def visit(path, settle=0.5):
            events.clear()
            call("Page.navigate", url=base + path)
            end = time.monotonic() + 30
            while not any(e.get("method") == "Page.loadEventFired" for e in events):
                if time.monotonic() > end:
                    problems.append(f"{path}: no load event in 30 s")
                    break
                events.append(json.loads(ws.recv(timeout=30)))
            pump(settle)
            for e in events:
                method, params = e.get("method"), e.get("params", {})
                if method == "Runtime.exceptionThrown":
                    problems.append(f"{path}: uncaught exception: {params['exceptionDetails'].get('text')} "
                                    f"{params['exceptionDetails'].get('exception', {}).get('description', '')}")
                elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                    text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                    problems.append(f"{path}: console error: {text}")
                elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                    problems.append(f"{path}: console error: {params['entry'].get('text')} {params['entry'].get('url', '')}")
                elif method == "Network.loadingFailed" and not params.get("canceled"):
                    problems.append(f"{path}: a request failed: {params.get('errorText')}")
                elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
                    problems.append(f"{path}: {params['response']['status']} for {params['response']['url']}")
            broken = evaluate("[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
            problems.extend(f"{path}: broken image {src}" for src in broken)
            sheets = evaluate("[...document.querySelectorAll('link[rel=stylesheet]')].map(l => [l.href, !!l.sheet])")
            if not sheets:
                problems.append(f"{path}: no stylesheet linked")
            problems.extend(f"{path}: stylesheet not loaded: {href}" for href, ok in sheets if not ok)
            if evaluate("getComputedStyle(document.querySelector('.sidebar-drawer') || document.body).display") is None:
                problems.append(f"{path}: the theme's layout is missing")

        for path in PAGES:
            visit(path)
            shot = call("Page.captureScreenshot", format="png")["data"]
            name = path.replace("/", "_").replace(".html", ".png")
            with open(os.path.join(shots, name), "wb") as f:
                f.write(base64.b64decode(shot))
            title = evaluate("document.title")
            print(f"ok {path}: {title!r}, {evaluate('document.images.length')} images, "
                  f"{evaluate('document.styleSheets.length')} stylesheets")

        # The search box: Sphinx's search page fills its results in from searchindex.js.
        visit("search.html?q=reset", settle=1.0)
        found = 0
        end = time.monotonic() + 20
        while time.monotonic() < end:
            found = evaluate("document.querySelectorAll('#search-results li, ul.search li').length")
            if found:
                break
            pump(0.25)
        if not found:
            problems.append("search.html?q=reset: the search found nothing for 'reset'")
        else:
            print(f"ok search for 'reset': {found} results")
        with open(os.path.join(shots, "search_reset.png"), "wb") as f:
            f.write(base64.b64decode(call("Page.captureScreenshot", format="png")["data"]))
    if problems:
        print("\n".join(["the docs site in Chromium:"] + problems), file=sys.stderr)
        sys.exit(1)
    print(f"the docs site in Chromium: {len(PAGES)} pages and a search, no problem; screenshots in {shots}")
finally:
    browser.terminate()
    try:
        browser.wait(10)
    except subprocess.TimeoutExpired:
        browser.kill()
    httpd.shutdown()
    shutil.rmtree(profile, ignore_errors=True)
PY
