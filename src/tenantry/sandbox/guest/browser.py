"""The guest's browser: headless Chromium, driven over the DevTools protocol by the guest
agent (``agent.py``'s ``browser`` op). It runs inside the run's sandbox, never on a worker.

Standard library only, like the agent: it is copied into the guest beside it and loaded by
path. Chromium is started on the first browser request with ``--remote-debugging-pipe``
(commands on its fd 3, replies and events on its fd 4, each a JSON object ended by a NUL
byte), so no port is opened and no WebSocket library is needed. It lives for the
sandbox's life: cookies, storage and the open page persist between the run's steps, never
between runs (the profile is a fresh folder in the sandbox's own /tmp).

Containment is not here: Chromium's only way out is the sandbox's egress relay
(``--proxy-server``, with loopback sent through it too: ``<-loopback>``), so the host's
proxy applies the tenant's allow-list and refuses internal and metadata addresses as it does
for code, and resolves every name itself. This driver adds what only the browser can: http
and https only (no ``file:``, ``chrome:``, ``data:`` …), downloads denied, a page-load
timeout, and caps on pages and bytes per sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

#: Where Debian's ``chromium-headless-shell`` puts the browser (host /usr on gVisor and
#: bwrap, the browser image on microvm).
BINARIES = ("/usr/lib/chromium/chromium-headless-shell", "/usr/bin/chromium-headless-shell")
SCHEMES = ("http:", "https:")
#: The egress relay, as the code's HTTP(S)_PROXY names it.
PROXY = "http://127.0.0.1:3128"
VIEWPORT = (1280, 800)
#: After a click or a key, how long a navigation has to start before the page is taken
#: as it is.
SETTLE_S = 0.5
#: What reading a loaded page's state may take (past the action's own time limit).
STATE_S = 10.0
MAX_TEXT = 200_000  # characters of readable text the agent returns (the host caps again)
MAX_EXTRACT = 200

FLAGS = (
    "--headless", "--no-sandbox",  # the sandbox around it is the boundary (ADR 0033)
    "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
    "--disable-extensions", "--disable-component-extensions-with-background-pages",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-breakpad", "--disable-domain-reliability",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,"
    "AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
    "--metrics-recording-only", "--mute-audio", "--no-pings", "--password-store=basic",
    "--use-mock-keychain", "--hide-scrollbars", "--deny-permission-prompts",
    f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
    f"--proxy-server={PROXY}", "--proxy-bypass-list=<-loopback>",
    "--remote-debugging-pipe",
)

#: The page's readable state, evaluated in the page.
_STATE_JS = """(() => ({title: document.title || "", url: location.href,
  text: document.body ? document.body.innerText : ""}))()"""
_FIND_JS = """(function(selector, text) {
  let el = null;
  if (selector) { el = document.querySelector(selector); }
  else {
    const want = text.trim().toLowerCase();
    const all = Array.from(document.querySelectorAll(
      'a, button, input[type=submit], input[type=button], [role=button], label, summary'));
    el = all.find(e => (e.innerText || e.value || '').trim().toLowerCase() === want)
      || all.find(e => (e.innerText || e.value || '').trim().toLowerCase().includes(want));
  }
  if (!el) return null;
  el.scrollIntoView({block: 'center'});
  return el;
})"""


class BrowserRefused(Exception):
    """What the browser will not do (a scheme, a cap, no element); told to the model."""


class BrowserFailed(Exception):
    """The browser could not do what was asked (it would not start, it died, it timed
    out); the agent reports it as an error of the call."""


class Browser:
    def __init__(self, *, uid: int | None = None, tmp_root: str = "/tmp") -> None:
        self.uid = uid
        self.tmp_root = tmp_root
        self.process: subprocess.Popen[bytes] | None = None
        self.profile: str | None = None
        self._write_fd = -1
        self._read_fd = -1
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self.session: str | None = None
        self.log: str | None = None
        self.pages = 0
        self.bytes = 0

    # -- life --------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float) -> float:
        """Start Chromium and open its one page; the seconds it took."""
        started = time.monotonic()
        binary = next((b for b in BINARIES if os.path.exists(b)), None)
        if binary is None:
            raise BrowserFailed("no browser in this sandbox (Debian's chromium-headless-shell "
                                "is not installed where the sandbox can see it)")
        self.profile = tempfile.mkdtemp(prefix="browser-", dir=self.tmp_root)
        if self.uid is not None:
            os.chown(self.profile, self.uid, self.uid)
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def arrange() -> None:  # in the child: the pipes at 3 and 4, the rest closed
            # Moved clear of 3 and 4 first: either may be the other's target.
            reading = os.dup2(to_browser_r, 100)
            writing = os.dup2(from_browser_w, 101)
            os.dup2(reading, 3)
            os.dup2(writing, 4)
            os.closerange(5, 65536)
            os.setsid()

        env = {"PATH": "/usr/bin:/bin", "HOME": self.profile, "LANG": "C.UTF-8",
               "TMPDIR": self.profile, "XDG_CONFIG_HOME": self.profile,
               "XDG_CACHE_HOME": self.profile}
        argv = [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"]
        # Its own log, in the profile: the tail says why, when it will not start.
        self.log = os.path.join(self.profile, "browser.log")
        log = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if self.uid is not None:
            os.fchown(log, self.uid, self.uid)
        try:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                preexec_fn=arrange, close_fds=False, user=self.uid, group=self.uid,
                extra_groups=[] if self.uid is not None else None)
        finally:
            os.close(to_browser_r)
            os.close(from_browser_w)
            os.close(log)
        self._write_fd, self._read_fd = to_browser_w, from_browser_r
        deadline = started + timeout
        self.command("Browser.setDownloadBehavior", {"behavior": "deny"}, deadline=deadline)
        targets = self.command("Target.getTargets", deadline=deadline)["targetInfos"]
        page = next((t for t in targets if t.get("type") == "page"), None)
        if page is None:
            page = {"targetId": self.command("Target.createTarget", {"url": "about:blank"},
                                             deadline=deadline)["targetId"]}
        self.session = self.command("Target.attachToTarget",
                                    {"targetId": page["targetId"], "flatten": True},
                                    deadline=deadline)["sessionId"]
        for method in ("Page.enable", "Network.enable", "Runtime.enable"):
            self.command(method, session=True, deadline=deadline)
        self.command("Page.setDownloadBehavior", {"behavior": "deny"}, session=True,
                     deadline=deadline)
        return time.monotonic() - started

    def close(self) -> None:
        if self.process is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, 9)
            try:
                self.process.kill()
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for fd in (self._write_fd, self._read_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._write_fd = self._read_fd = -1
        self.process = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    # -- actions -----------------------------------------------------------------------

    def open(self, url: str, *, timeout: float, max_pages: int, max_bytes: int
             ) -> dict[str, Any]:
        check_url(url)
        self._budget(max_pages, max_bytes)
        deadline = time.monotonic() + timeout
        self._events.clear()
        reply = self.command("Page.navigate", {"url": url}, session=True, deadline=deadline)
        self.pages += 1
        error = reply.get("errorText") or self._wait_for_load(deadline)
        return self._page_state(error or None, time.monotonic() + STATE_S, max_bytes)

    def click(self, selector: str | None, text: str | None, *, timeout: float,
              max_pages: int, max_bytes: int) -> dict[str, Any]:
        self._budget(max_pages, max_bytes)
        deadline = time.monotonic() + timeout
        self._events.clear()
        found = self._call_on_element(selector, text, "function() { this.click(); }",
                                      deadline)
        if not found:
            raise BrowserRefused(f"no element matches {_what(selector, text)}")
        return self._after_interaction(deadline, max_bytes)

    def type(self, selector: str, text: str, *, submit: bool, timeout: float,
             max_pages: int, max_bytes: int) -> dict[str, Any]:
        self._budget(max_pages, max_bytes)
        deadline = time.monotonic() + timeout
        self._events.clear()
        found = self._call_on_element(selector, None, "function() { this.focus(); }",
                                      deadline)
        if not found:
            raise BrowserRefused(f"no element matches {_what(selector, None)}")
        self.command("Input.insertText", {"text": text}, session=True, deadline=deadline)
        if submit:
            for kind in ("keyDown", "keyUp"):
                self.command("Input.dispatchKeyEvent",
                             {"type": kind, "key": "Enter", "code": "Enter",
                              "windowsVirtualKeyCode": 13, "text": "\r"},
                             session=True, deadline=deadline)
        return self._after_interaction(deadline, max_bytes)

    def screenshot(self, *, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        shot = self.command("Page.captureScreenshot", {"format": "png"}, session=True,
                            deadline=deadline)
        state = self._evaluate(_STATE_JS, deadline) or {}
        return {"png": shot["data"], "url": state.get("url", ""),
                "title": state.get("title", "")}

    def extract(self, selector: str, *, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        script = (f"Array.from(document.querySelectorAll({json.dumps(selector)}))"
                  f".slice(0, {MAX_EXTRACT}).map(e => (e.innerText || e.value || "
                  f"e.getAttribute('href') || '').trim())")
        try:
            items = self._evaluate(script, deadline)
        except BrowserRefused as exc:
            raise BrowserRefused(f"not a valid selector: {selector} ({exc})") from None
        state = self._evaluate(_STATE_JS, deadline) or {}
        return {"url": state.get("url", ""), "matches": items or []}

    # -- the protocol ------------------------------------------------------------------

    def command(self, method: str, params: dict[str, Any] | None = None, *,
                session: bool = False, deadline: float) -> dict[str, Any]:
        if not self.alive:
            raise BrowserFailed("the browser is not running")
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        data = json.dumps(message).encode() + b"\0"
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._write_fd, view):]
            except OSError as exc:
                raise BrowserFailed(f"the browser stopped ({exc})") from None
        while True:
            reply = self._read(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserRefused(str(reply["error"].get("message", reply["error"])))
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self._note(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserFailed("the page did not answer in time")
            ready, _, _ = select.select([self._read_fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                raise BrowserFailed(f"the browser stopped{self._why()}")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(raw)
        return parsed

    def _why(self) -> str:
        """The end of the browser's own log, for a failure's message."""
        try:
            with open(self.log or "", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 400))
                tail = f.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return f": {tail}" if tail else ""

    def _note(self, event: dict[str, Any]) -> None:
        method = event["method"]
        params = event.get("params", {})
        if method == "Network.loadingFinished":
            self.bytes += int(params.get("encodedDataLength") or 0)
        elif method == "Network.dataReceived":
            return
        self._events.append(event)

    def _pump(self, until: float, done: str) -> bool:
        """Take events until one named ``done`` has come (True) or ``until`` (False)."""
        while not any(e["method"] == done for e in self._events):
            if b"\0" not in self._buffer:
                left = until - time.monotonic()
                if left <= 0:
                    return False
                ready, _, _ = select.select([self._read_fd], [], [], left)
                if not ready:
                    return False
            event = self._read(until + 1.0)
            if "method" in event:
                self._note(event)
        return True

    def _wait_for_load(self, deadline: float) -> str | None:
        """None once the page has loaded; at the deadline, loading is stopped and the
        model gets what there is, and why."""
        if self._pump(deadline, "Page.loadEventFired"):
            return None
        self.command("Page.stopLoading", session=True, deadline=time.monotonic() + STATE_S)
        return "the page did not finish loading within the time limit; shown as far as it got"

    def _after_interaction(self, deadline: float, max_bytes: int) -> dict[str, Any]:
        # A navigation the click or key caused starts within the settling time, or the
        # page is taken as it is (a script may have changed it in place).
        error = None
        if self._pump(min(deadline, time.monotonic() + SETTLE_S), "Page.frameStartedLoading"):
            self.pages += 1
            error = self._wait_for_load(deadline)
        return self._page_state(error, time.monotonic() + STATE_S, max_bytes)

    def _page_state(self, error: str | None, deadline: float, max_bytes: int
                    ) -> dict[str, Any]:
        state = self._evaluate(_STATE_JS, deadline) or {}
        url = str(state.get("url", ""))
        if url != "about:blank" and not url.startswith(SCHEMES) and not url.startswith(
                "chrome-error:"):
            self.command("Page.navigate", {"url": "about:blank"}, session=True,
                         deadline=deadline)
            raise BrowserRefused(f"the page went to {url.split(':', 1)[0]}: — only http and "
                                 "https pages may be opened")
        status = None
        for event in self._events:
            if event["method"] == "Network.responseReceived" and (
                    event["params"].get("type") == "Document"):
                status = event["params"]["response"].get("status")
        text = str(state.get("text", ""))
        result: dict[str, Any] = {"url": url, "title": state.get("title", ""),
                                  "status": status, "text": text[:MAX_TEXT],
                                  "text_truncated": len(text) > MAX_TEXT,
                                  "pages": self.pages, "bytes": self.bytes}
        if error:
            result["error"] = error
        if self.bytes > max_bytes:
            result["note"] = (f"this run's browser has now loaded {self.bytes} bytes, over "
                              f"its cap of {max_bytes}: it opens no more pages")
        return result

    def _budget(self, max_pages: int, max_bytes: int) -> None:
        if self.pages >= max_pages:
            raise BrowserRefused(f"this run's browser has opened its cap of {max_pages} pages")
        if self.bytes > max_bytes:
            raise BrowserRefused(f"this run's browser has loaded its cap of {max_bytes} bytes")

    def _evaluate(self, expression: str, deadline: float) -> Any:
        reply = self.command("Runtime.evaluate", {"expression": expression,
                                                  "returnByValue": True},
                             session=True, deadline=deadline)
        if "exceptionDetails" in reply:
            detail = reply["exceptionDetails"]
            raise BrowserRefused(str(detail.get("exception", {}).get("description")
                                     or detail.get("text", "the page's script failed")))
        return reply.get("result", {}).get("value")

    def _call_on_element(self, selector: str | None, text: str | None, function: str,
                         deadline: float) -> bool:
        found = self.command("Runtime.evaluate", {
            "expression": f"({_FIND_JS})({json.dumps(selector)}, {json.dumps(text or '')})"},
            session=True, deadline=deadline)
        if "exceptionDetails" in found:
            raise BrowserRefused(f"not a valid selector: {selector}")
        handle = found.get("result", {}).get("objectId")
        if not handle:
            return False
        self.command("Runtime.callFunctionOn", {"objectId": handle,
                                                "functionDeclaration": function},
                     session=True, deadline=deadline)
        return True


def check_url(url: str) -> None:
    if not url.lower().startswith(("http://", "https://")):
        scheme = url.split(":", 1)[0] if ":" in url else url[:20]
        raise BrowserRefused(f"only http and https pages may be opened, not {scheme}:")


def _what(selector: str | None, text: str | None) -> str:
    return f"the selector {selector!r}" if selector else f"the text {text!r}"

