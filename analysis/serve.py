"""python -m analysis serve FOLDER: serve a sweep's report (or a comparison) on localhost, so that
its Perfetto buttons can hand traces to ui.perfetto.dev, and open the page in a browser.

Only this machine can connect (127.0.0.1). A comparison folder also serves the traces of its two
sides, read from its compare.json, under /_base/ and /_new/; nothing outside FOLDER and those two
folders is served.
"""

from __future__ import annotations

import functools
import posixpath
import signal
import sys
import threading
import webbrowser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from profsweep.contract import COMPARE_FILE, COMPARE_PAGE, REPORT_FILE, SERVED_BASE, SERVED_NEW, read_json


class ServeError(ValueError):
    """A folder that has nothing to serve; the message names it (exit 2)."""


def page_of(folder: Path) -> str:
    """The page to open: compare.html in a comparison folder, else report.html."""
    for name in (COMPARE_PAGE, REPORT_FILE):
        if (folder / name).is_file():
            return name
    raise ServeError(f"{folder}: no report.html or compare.html to serve: write one first with "
                     f"python -m analysis {folder}  (or python -m analysis compare BASE NEW)")


def mounts_of(folder: Path) -> dict[str, Path]:
    """URL folder -> disk folder: '' is FOLDER; a comparison adds its two sides."""
    mounts = {"": folder.resolve()}
    try:
        sides = read_json(folder / COMPARE_FILE)
    except (OSError, ValueError):
        return mounts
    for mount, key in ((SERVED_BASE, "base"), (SERVED_NEW, "new")):
        if isinstance(sides.get(key), str) and Path(sides[key]).is_dir():
            mounts[mount] = Path(sides[key]).resolve()
    return mounts


class Handler(SimpleHTTPRequestHandler):
    mounts: dict[str, Path] = {}

    def translate_path(self, path: str) -> str:
        parts = [p for p in posixpath.normpath(unquote(urlsplit(path).path)).split("/") if p and p not in (".", "..")]
        root = self.mounts[""]
        if parts and parts[0] in self.mounts and parts[0]:
            root, parts = self.mounts[parts[0]], parts[1:]
        target = root.joinpath(*parts).resolve() if parts else root
        if target != root and root not in target.parents:  # a symlink that leads out of the folder
            return ""
        return str(target)

    def send_head(self):  # noqa: ANN201 - the base class's signature
        if not self.translate_path(self.path):
            self.send_error(404, "not served: outside the folder")
            return None
        return super().send_head()

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")  # a rewritten report is served anew
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # quiet: the command prints its URL once


def make_server(folder: Path, port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    """A server of `folder` on 127.0.0.1 (port 0: any free one) and the URL of its page."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ServeError(f"{folder}: no such folder")
    page = page_of(folder)
    handler = functools.partial(type("FolderHandler", (Handler,), {"mounts": mounts_of(folder)}),
                                directory=str(folder.resolve()))
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise ServeError(f"--port {port}: cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    return server, f"http://127.0.0.1:{server.server_address[1]}/{page}"


def stale_report(folder: Path) -> str:
    """Why the sweep's report is older than its jobs ('' when it is not): a sweep resumed, or a job
    rerun, and stopped before its analysis left the old one."""
    from analysis.store import newer_records, older_than_records

    newer, _ = newer_records(folder)
    return (f"{older_than_records(folder, newer)}: the report is of the jobs before them; python -m analysis "
            f"{folder} writes it anew") if newer else ""


def serve(folder: Path, port: int = 0, browser: bool = True) -> int:
    try:
        server, url = make_server(folder, port)
    except ServeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"serving {folder} at {url}  (only this machine can connect; Ctrl-C stops)", flush=True)
    stale = stale_report(Path(folder))
    if stale:
        print(f"warning: {stale}", flush=True)
    if browser:
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt as exc:
        if exc.args and exc.args[0] == signal.SIGTERM:  # a SIGTERM (analysis.__main__.stoppable): exit 143
            raise
        print("stopped")  # Ctrl-C, how a server is stopped
    finally:
        server.server_close()
    return 0
