"""`ccdiff serve-reports` (the compose `report` service): a real HTTP server on a free
loopback port, over a folder laid out like reports/ and findings/."""
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

import pytest

from ccdiff.report import server as report_server
from ccdiff.report.server import BoundedServer, ReportHandler, find_reports, index_page

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def served(tmp_path):
    for rel in ("reports/html", "reports/conform/report/quiche@0.26.0", "findings/quiche@0.26.0/report"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "index.html").write_text(f"<h1>report {rel}</h1>")
    (tmp_path / "reports/html/findings/x").mkdir(parents=True)         # a report's own page
    (tmp_path / "reports/html/findings/x/index.html").write_text("finding page")
    (tmp_path / "findings/quiche@0.26.0/.work/afl/w1/queue").mkdir(parents=True)   # a corpus
    (tmp_path / "findings/quiche@0.26.0/.work/index.html").write_text("corpus")
    (tmp_path / "findings/quiche@0.26.0/.work/afl/w1/queue/id:000000").write_bytes(b"\x00")
    server = BoundedServer(("127.0.0.1", 0), partial(ReportHandler, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def get(url: str) -> tuple:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_index_lists_each_report_once_and_no_corpus(served):
    status, page = get(served + "/")
    assert status == 200
    links = [line for line in page.splitlines() if line.startswith("<li>")]
    assert links == ['<li><a href="/findings/quiche%400.26.0/report/">findings/quiche@0.26.0/report</a></li>',
                     '<li><a href="/reports/conform/report/quiche%400.26.0/">'
                     'reports/conform/report/quiche@0.26.0</a></li>',
                     '<li><a href="/reports/html/">reports/html</a></li>']


def test_report_pages_are_served_and_hidden_or_outside_paths_are_not(served):
    assert get(served + "/reports/html/") == (200, "<h1>report reports/html</h1>")
    assert get(served + "/findings/quiche%400.26.0/report/index.html")[0] == 200
    assert get(served + "/reports/html/findings/x/") == (200, "finding page")
    assert get(served + "/findings/quiche@0.26.0/.work/afl/w1/queue/id:000000")[0] == 404
    assert get(served + "/findings/quiche@0.26.0/.work/index.html")[0] == 404
    assert get(served + "/%2e%2e/%2e%2e/etc/passwd")[0] == 404


def test_read_only(served):
    request = urllib.request.Request(served + "/reports/html/new.html", data=b"x", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(request, timeout=10)
    assert exc.value.code == 501


def test_empty_folder_says_so(tmp_path):
    assert find_reports(tmp_path) == []
    assert b"No reports yet" in index_page(tmp_path)


def test_missing_folder_is_exit_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ccdiff", "serve-reports", str(tmp_path / "nope"), "--port", "0"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "not a folder" in result.stderr and "Traceback" not in result.stderr


def raw_request(base: str, request: bytes) -> bytes:
    """Send bytes as they are (urllib would quote or refuse them) and read the whole answer."""
    import socket
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def headers_of(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(response.headers)


def test_symlinks_out_of_the_folder_are_not_followed(served, tmp_path):
    (tmp_path / "rootlink").symlink_to("/")
    (tmp_path / "reports/passwd").symlink_to("/etc/passwd")
    (tmp_path / "reports/inside").symlink_to(tmp_path / "reports/html")   # a link that stays inside
    assert get(served + "/rootlink/")[0] == 404
    assert get(served + "/rootlink/etc/passwd")[0] == 404
    assert get(served + "/reports/passwd")[0] == 404
    assert get(served + "/reports/inside/index.html") == (200, "<h1>report reports/html</h1>")
    status, listing = get(served + "/reports/")
    assert status == 200
    assert [line for line in listing.splitlines() if line.startswith("<li>")] == [
        '<li><a href="conform/">conform/</a></li>', '<li><a href="html/">html/</a></li>',
        '<li><a href="inside/">inside/</a></li>']


def test_listings_hide_dotfiles(served, tmp_path):
    (tmp_path / "findings/quiche@0.26.0/.secret").write_text("x")
    status, listing = get(served + "/findings/quiche%400.26.0/")
    assert status == 200
    assert [line for line in listing.splitlines() if line.startswith("<li>")] == [
        '<li><a href="report/">report/</a></li>']


@pytest.mark.parametrize("path", ["/", "/reports/html/", "/reports/", "/nope"])
def test_every_answer_carries_the_security_headers(served, path):
    try:
        headers = headers_of(served + path)
    except urllib.error.HTTPError as exc:
        headers = dict(exc.headers)
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Content-Security-Policy"].startswith("default-src 'none';")
    assert "script-src" not in headers["Content-Security-Policy"]


@pytest.mark.parametrize("request_line", [b"GET /%00 HTTP/1.0", b"GET /a%00b/ HTTP/1.0", b"GET /%ff%fe HTTP/1.0",
                                          b"GET /%0a HTTP/1.0", b"HEAD /%00 HTTP/1.0", b"GET x HTTP/1.0"])
def test_malformed_requests_get_400_and_no_traceback(served, capfd, request_line):
    answer = raw_request(served, request_line + b"\r\n\r\n")
    assert answer.split(b"\r\n", 1)[0] == b"HTTP/1.0 400 Bad Request"
    assert "Traceback" not in capfd.readouterr().err


def test_idle_strangers_cannot_hold_the_server(served, monkeypatch):
    """Issue #32: a thread per connection and no idle timeout: idle connections held it for
    ever.  Now MAX_CONNECTIONS at once (one more: 503 at once) and each idle one is closed."""
    import socket
    import time
    from urllib.parse import urlsplit
    port = urlsplit(served).port
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10)
            for _ in range(report_server.MAX_CONNECTIONS)]
    try:
        time.sleep(0.5)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert extra.recv(64).startswith(b"HTTP/1.0 503")
        extra.close()
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 10
    while get(served + "/reports/html/")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert get(served + "/reports/html/") == (200, "<h1>report reports/html</h1>")
    assert ReportHandler.timeout == report_server.IDLE_TIMEOUT > 0
    one = socket.create_connection(("127.0.0.1", port), timeout=60)
    monkeypatch.setattr(ReportHandler, "timeout", 0.5)     # a connection that sends nothing ...
    two = socket.create_connection(("127.0.0.1", port), timeout=60)
    started = time.monotonic()
    assert two.recv(1) == b"" and time.monotonic() - started < 30    # ... is closed by the server
    one.close()
    two.close()

