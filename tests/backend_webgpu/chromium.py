"""Headless Chromium driven over ``--remote-debugging-pipe``: open a page, read it back.

The DevTools protocol over a pipe needs no network port and no extra package: Chromium reads
JSON messages, each ending with a NUL byte, from file descriptor 3 and writes its own to 4.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

#: The flags measured to give WebGPU (SwiftShader) in a headless, sandboxless container.
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-unsafe-webgpu",
    "--use-webgpu-adapter=swiftshader",
    "--disable-gpu-sandbox",
]


def find_chromium() -> str | None:
    """The Chromium executable on PATH, if any."""
    return next(
        (
            p
            for name in ("chromium", "chromium-browser", "google-chrome")
            if (p := shutil.which(name))
        ),
        None,
    )


class Chromium:
    """A headless browser showing ``url``; ``evaluate`` runs JavaScript in the page."""

    def __init__(self, url: str, executable: str):
        self.profile = tempfile.mkdtemp(prefix="fusegrad-chromium-")
        to_browser, self.writer = os.pipe()
        self.reader, from_browser = os.pipe()
        # give the child's ends numbers above 4, so that moving them to 3 and 4 clobbers nothing
        high_in, high_out = _above(to_browser, 10), _above(from_browser, 10)
        os.close(to_browser)
        os.close(from_browser)

        def move_pipes() -> None:
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe", url],
            close_fds=False,
            preexec_fn=move_pipes,  # close_fds would close 3 and 4 after the move
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(high_in)
        os.close(high_out)
        self.next_id, self.buffer = 0, b""
        self.session = self._attach()

    def send(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = 30,
    ) -> dict:
        """Call a DevTools method and wait for its answer (events met on the way are dropped)."""
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.writer, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reader], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.reader, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def _attach(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pages = [
                t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page"
            ]
            if pages:
                found = self.send(
                    "Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True}
                )
                return found["sessionId"]
            time.sleep(0.2)
        raise TimeoutError("Chromium opened no page")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        reply = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session
        )
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := self.evaluate(expression):
                return value
            time.sleep(0.25)
        raise TimeoutError(f"after {timeout}s the page still has no value for {expression!r}")

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self.reader, self.writer):
            os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)


def _above(fd: int, minimum: int) -> int:
    import fcntl

    return fcntl.fcntl(
        fd, fcntl.F_DUPFD_CLOEXEC, minimum
    )  # only its copy as 3 or 4 reaches Chromium
