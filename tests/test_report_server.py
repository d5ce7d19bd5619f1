"""`ccdiff serve-reports` (the compose `report` service): a real HTTP server on a free
loopback port, over a folder laid out like reports/ and findings/."""
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from ccdiff.report.server import ReportHandler, find_reports, index_page

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
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(ReportHandler, directory=str(tmp_path)))
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
