"""`ccdiff serve-reports DIR`: the HTML reports under DIR over HTTP, read-only.

The compose `report` service runs it on the reports and findings folders
(docs/containers.md).  `/` is a page listing every report: a folder holding an
index.html (a report's own finding pages are not listed again).  Everything
else is a static file, served by the standard library's SimpleHTTPRequestHandler
(GET and HEAD only: nothing is ever written).  Hidden folders (the fuzzers'
corpora under FINDINGS/<stack>/.work) are neither listed nor served.
"""
from __future__ import annotations

import html
import os
import sys
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


class ReportHandler(SimpleHTTPRequestHandler):
    server_version = "ccdiff-reports"

    def do_GET(self):
        if self._hidden():
            self.send_error(HTTPStatus.NOT_FOUND)
        elif urlsplit(self.path).path == "/":
            page = index_page(Path(self.directory))
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
        else:
            super().do_GET()

    def do_HEAD(self):
        if self._hidden():
            self.send_error(HTTPStatus.NOT_FOUND)
        else:
            super().do_HEAD()

    def _hidden(self) -> bool:
        return any(part.startswith(".") for part in unquote(urlsplit(self.path).path).split("/"))


def serve_reports(folder: str, host: str, port: int) -> int:
    root = Path(folder)
    if not root.is_dir():
        raise SetupError(f"{folder}: not a folder")
    handler = partial(ReportHandler, directory=str(root.resolve()))
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise SetupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    print(f"serving the reports under {root} on http://{host}:{server.server_address[1]}/", file=sys.stderr,
          flush=True)
    with server:
        server.serve_forever()
    return 0
