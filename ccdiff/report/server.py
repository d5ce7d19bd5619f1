"""`ccdiff serve-reports DIR`: the HTML reports under DIR over HTTP, read-only.

The compose `report` service runs it on the reports and findings folders
(docs/containers.md).  `/` is a page listing every report: a folder holding an
index.html (a report's own finding pages are not listed again).  Everything
else is a static file, served by the standard library's SimpleHTTPRequestHandler
(GET and HEAD only: nothing is ever written).  Hidden folders (the fuzzers'
corpora under FINDINGS/<stack>/.work) are neither listed nor served.
"""
from __future__ import annotations

import contextlib
import html
import io
import os
import sys
import threading
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from ..errors import SetupError

MAX_DEPTH = 4      # reports/conform/report/<stack>/index.html is the deepest one ccdiff writes


def find_reports(root: Path) -> list[str]:
    """Folders (relative, '/'-separated, sorted) under root that hold an index.html."""
    found = []
    for folder, subdirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        if "index.html" in files and rel.parts:
            found.append(rel.as_posix())
            subdirs[:] = []                     # its own pages belong to it
            continue
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".")) if len(rel.parts) < MAX_DEPTH else []
    return sorted(found)


def index_page(root: Path) -> bytes:
    reports = find_reports(root)
    items = "\n".join(f'<li><a href="/{quote(rel)}/">{html.escape(rel)}</a></li>' for rel in reports)
    body = f"<ul>\n{items}\n</ul>" if reports else "<p>No reports yet (no index.html under the folder served).</p>"
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ccdiff reports</title>"
            f"</head>\n<body><h1>ccdiff reports</h1>\n{body}\n</body></html>\n").encode()


# Reports are static pages with an inline stylesheet and PNG plots, no script: anything
# else a page might try (a script in a trace name that escaped escaping, framing) is refused.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


# A connection is one thread: at most MAX_CONNECTIONS at once (one more is answered 503 and
# closed at once, the accept loop never waits), and a connection that sends nothing for
# IDLE_TIMEOUT seconds is closed, so idle strangers cannot hold the threads.
MAX_CONNECTIONS = 64
IDLE_TIMEOUT = float(os.environ.get("CCDIFF_REPORTS_IDLE_TIMEOUT", "30"))


class BoundedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args, **kwargs):
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class ReportHandler(SimpleHTTPRequestHandler):
    server_version = "ccdiff-reports"
    timeout = IDLE_TIMEOUT

    def do_GET(self):
        if self._refused():
            return
        if urlsplit(self.path).path == "/":
            page = index_page(Path(self.directory))
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
        else:
            super().do_GET()

    def do_HEAD(self):
        if not self._refused():
            super().do_HEAD()

    def end_headers(self):
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        super().end_headers()

    def _refused(self) -> bool:
        """Answer 400 or 404 here, or return False to serve the request."""
        try:
            path = unquote(urlsplit(self.path).path, errors="strict")
        except (UnicodeDecodeError, ValueError):
            self.send_error(HTTPStatus.BAD_REQUEST, explain="the path is not UTF-8")
            return True
        if not path.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in path):
            self.send_error(HTTPStatus.BAD_REQUEST, explain="malformed path")
            return True
        if any(part.startswith(".") for part in path.split("/")) or not self._inside(path):
            self.send_error(HTTPStatus.NOT_FOUND)
            return True
        return False

    def _inside(self, path: str) -> bool:
        """The file the path names, symlinks resolved, is inside the served folder: a link
        to / (or anywhere else outside) is answered as if it did not exist."""
        root = os.path.realpath(self.directory)
        target = os.path.realpath(self.translate_path(path))
        return target == root or target.startswith(root + os.sep)

    def list_directory(self, path):
        """The standard listing without hidden names or links that lead outside."""
        try:
            names = sorted(os.listdir(path), key=str.lower)
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND)
            return None
        root = os.path.realpath(self.directory)
        shown = []
        for name in names:
            full = os.path.realpath(os.path.join(path, name))
            if name.startswith(".") or not (full == root or full.startswith(root + os.sep)):
                continue
            label = name + "/" if os.path.isdir(full) else name
            shown.append(f'<li><a href="{quote(label)}">{html.escape(label)}</a></li>')
        title = html.escape(unquote(urlsplit(self.path).path))
        page = (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\n"
                f"<body><h1>{title}</h1>\n<ul>\n" + "\n".join(shown) + "\n</ul>\n</body></html>\n").encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        return io.BytesIO(page)


def serve_reports(folder: str, host: str, port: int) -> int:
    root = Path(folder)
    if not root.is_dir():
        raise SetupError(f"{folder}: not a folder")
    handler = partial(ReportHandler, directory=str(root.resolve()))
    try:
        server = BoundedServer((host, port), handler)
    except OSError as exc:
        raise SetupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    print(f"serving the reports under {root} on http://{host}:{server.server_address[1]}/", file=sys.stderr,
          flush=True)
    with server:
        server.serve_forever()
    return 0
