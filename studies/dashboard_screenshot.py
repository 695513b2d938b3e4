"""A screenshot of optuna-dashboard showing a real study, as headless Chromium renders it.

Tunes matmul 32³ for 16 trials (8, then 8 more in a resumed run, so that the progress plot
follows), serves the study with `tensortune dashboard` on a free port, and has headless
Chromium draw the study's page. The picture is taken into a temporary folder, checked (a PNG
of the window's size), and only then copied to ``results/dashboard_screenshot.png``.
tests/test_dashboard.py takes and checks a screenshot the same way, into its own temporary
folder.

    python studies/dashboard_screenshot.py [--out studies/results]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "dashboard_screenshot.png"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--virtual-time-budget=15000",
]
#: Width and height of the browser window, hence of the picture.
WINDOW = (1400, 2400)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def find_chromium() -> str | None:
    """The path of the headless Chromium (``chromium`` or ``chromium-browser``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tune_small_study(storage_url: str, trials: int = 8) -> None:
    """matmul 32³, `trials` trials (default 8) then as many more resumed, in the study ``mm``
    of `storage_url`."""
    import tensortune

    settings = tensortune.MeasureSettings(repeat=2, min_repeat_ms=2)
    for _ in range(2):  # created, then resumed: the plot must follow
        tensortune.tune(
            "matmul",
            shape=dict(M=32, N=32, K=32),
            n_trials=trials,
            storage=storage_url,
            study_name="mm",
            seed=0,
            settings=settings,
            show_progress=False,
        )


@contextlib.contextmanager
def serve(storage_url: str, port: int | None = None) -> Iterator[tuple[str, int]]:
    """Runs `tensortune dashboard` on `storage_url` (on `port`, default a free one) until the
    block ends; yields its base URL and port once its API answers."""
    port = port or free_port()
    command = [sys.executable, "-m", "tensortune.cli", "dashboard", "--storage", storage_url]
    server = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/studies", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tensortune dashboard did not answer on {base}") from None
                time.sleep(0.2)
        yield base, port
    finally:
        server.terminate()
        server.wait(timeout=30)


def png_size(path: str) -> tuple[int, int]:
    """(width, height) of the PNG at `path`; ValueError if it is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or not head.startswith(PNG_SIGNATURE) or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG")
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def screenshot(chromium: str, url: str, path: str) -> None:
    """Has headless `chromium` draw `url` into the PNG `path` (which must not exist yet), and
    checks that it wrote a picture of the window's size with something on it (over 10 kB);
    RuntimeError if not."""
    if os.path.exists(path):
        raise RuntimeError(f"{path} exists already: a stale picture would pass the check")
    width, height = WINDOW
    shot = [f"--window-size={width},{height}", f"--screenshot={path}"]
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, *shot, url], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"Chromium wrote no screenshot of {url}: {done.stderr[-2000:]}")
    if png_size(path) != WINDOW or os.path.getsize(path) <= 10_000:
        raise RuntimeError(f"{path} is not a {width}x{height} picture of the page")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder")
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        print(
            "dashboard_screenshot: no chromium on PATH (bash tests/system_deps.sh)", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="dashboard-screenshot-") as work:
        storage_url = f"sqlite:///{os.path.join(work, 'studies.db')}"
        tune_small_study(storage_url)
        taken = os.path.join(work, NAME)
        with serve(storage_url) as (base, _):
            screenshot(chromium, f"{base}/dashboard/studies/1", taken)
        os.makedirs(args.out, exist_ok=True)
        shutil.copyfile(taken, os.path.join(args.out, NAME))
    print(f"wrote {os.path.join(args.out, NAME)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
