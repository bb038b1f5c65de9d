"""Real servers and a real browser for the live-output tests, started on 127.0.0.1 by the tests themselves:
a mosquitto broker (Debian's ``mosquitto``) and headless chromium (Debian's, driven by Playwright).  ./dev's
test-tool step installs both; where either is missing the tests skip and say which package to install."""

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError("nothing listens on 127.0.0.1:%d after %.0f s" % (port, timeout))


@contextlib.contextmanager
def mosquitto(tmp_path: Path) -> Iterator[Tuple[int, subprocess.Popen]]:
    """A mosquitto broker on 127.0.0.1:<free port>, anonymous clients allowed; stopped afterwards."""
    exe = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
    if exe is None:
        pytest.skip("no mosquitto broker: apt-get install mosquitto (./dev test installs it)")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n" % port)
    proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield port, proc
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            proc.kill()


@contextlib.contextmanager
def chromium_page() -> Iterator[Tuple[Any, List[str]]]:
    """A page of headless Debian chromium through Playwright, and the list its console errors go to."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright==1.65.3 (requirements/dev.lock)")
    if not Path(CHROMIUM).exists():
        pytest.skip("no browser: apt-get install chromium (./dev test installs it)")
    with sync_api.sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])  # root in CI
        try:
            page = browser.new_page()
            errors: List[str] = []
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append("page error: %s" % exc))
            yield page, errors
        finally:
            browser.close()
