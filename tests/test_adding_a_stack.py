"""Adding a stack touches only its folder and its test file (issue #35, "The newcomer's path").

The test copies what ccdiff reads (implementations/, docs/, examples/, rfc/, scenarios/) into
a temporary CCDIFF_HOME and adds one throwaway stack folder, implementations/newcomer/, the
way docs/adding-a-stack.md says: a C stack whose "upstream" is a small NewReno with
beta = 3/4 (src/reno.c), pinned as a local tarball by sha256; its stack.toml, build.sh,
adapter.c, profile.toml (one deviation, checked by a mechanism), mechanisms.py, coverage.toml,
provenance.toml, entry_points.py and entry-points.md.  Nothing else in the copy changes (the
last test compares it with this checkout), and then:

- `ccdiff stacks` lists it, `ccdiff build` builds it, `ccdiff replay` runs it (its mechanism
  turns the shallow reductions into deviations), `ccdiff matrix` takes it by default,
  `ccdiff stacks --waivers` names its mechanism and `ccdiff coverage` measures its
  controller file;
- the contract tests that enumerate stacks find it: coverage (its coverage.toml), entry
  points (its parser and table, checked against its pinned source and adapter), provenance
  (its upstream record), mechanisms (its rule cites upstream), the clock tests' specs.

`ccdiff replay` takes one trace: several are refused in one line that names `ccdiff matrix`.
"""
from __future__ import annotations

import filecmp
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("implementations", "docs", "examples", "rfc", "scenarios")
STACK = "newcomer"

RENO_H = """\
/* newcomer 1.0: a NewReno (RFC 9002 section 7) with its own decrease factor, 3/4. */
#include <stdint.h>

typedef struct reno {
  uint64_t cwnd, ssthresh, mds;
  int64_t recovery_start;        /* INT64_MIN: none yet */
} reno;

typedef struct reno_ops {
  void (*on_sent)(reno *r, uint64_t bytes, int64_t now);
  void (*on_ack)(reno *r, uint64_t bytes, int64_t sent_time, int64_t now);
  void (*on_loss)(reno *r, int64_t sent_time, int64_t now);
  void (*on_ecn)(reno *r, int64_t sent_time, int64_t now);
  void (*on_persistent_congestion)(reno *r, int64_t now);
} reno_ops;

extern const reno_ops reno_algorithm;
void reno_init(reno *r, uint64_t mds);
"""

RENO_C = """\
#include "reno.h"

void reno_init(reno *r, uint64_t mds) {
  r->mds = mds;
  r->cwnd = 10 * mds;
  r->ssthresh = UINT64_MAX;
  r->recovery_start = INT64_MIN;
}

static void on_sent(reno *r, uint64_t bytes, int64_t now) { (void)r; (void)bytes; (void)now; }

static void on_ack(reno *r, uint64_t bytes, int64_t sent_time, int64_t now) {
  (void)now;
  if (sent_time <= r->recovery_start) return;         /* sent in recovery: no growth */
  if (r->cwnd < r->ssthresh) r->cwnd += bytes;        /* slow start */
  else r->cwnd += r->mds * bytes / r->cwnd;           /* congestion avoidance */
}

static void congestion_event(reno *r, int64_t sent_time, int64_t now) {
  if (sent_time <= r->recovery_start) return;         /* one reduction per recovery period */
  r->recovery_start = now;
  r->cwnd = r->cwnd * 3 / 4;                          /* beta = 3/4, newcomer's own choice */
  if (r->cwnd < 2 * r->mds) r->cwnd = 2 * r->mds;
  r->ssthresh = r->cwnd;
}

static void on_loss(reno *r, int64_t sent_time, int64_t now) { congestion_event(r, sent_time, now); }
static void on_ecn(reno *r, int64_t sent_time, int64_t now) { congestion_event(r, sent_time, now); }
static void on_persistent_congestion(reno *r, int64_t now) { (void)now; r->cwnd = 2 * r->mds; }

const reno_ops reno_algorithm = {on_sent, on_ack, on_loss, on_ecn, on_persistent_congestion};
"""

# The stack's own connection: the caller the adapter mirrors (entry-points.md cites it).
CONN_C = """\
#include "reno.h"

void conn_sent(reno *r, uint64_t bytes, int64_t now) { reno_algorithm.on_sent(r, bytes, now); }
void conn_ecn(reno *r, int64_t largest_sent, int64_t now) { reno_algorithm.on_ecn(r, largest_sent, now); }
void conn_acked(reno *r, uint64_t bytes, int64_t sent, int64_t now) { reno_algorithm.on_ack(r, bytes, sent, now); }
void conn_lost(reno *r, int64_t largest_sent, int64_t now) { reno_algorithm.on_loss(r, largest_sent, now); }
void conn_persistent(reno *r, int64_t now) { reno_algorithm.on_persistent_congestion(r, now); }
"""

ADAPTER_C = """\
/* newcomer's adapter: implementations/include/ccdiff_adapter.h over src/reno.h's ops, called in
 * src/conn.c's order (RFC 9002 Appendix A: ECN, then each acknowledged packet). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ccdiff_adapter.h"
#include "reno.h"

typedef struct { reno r; int64_t base; } ctl_t;

uint32_t ccd_abi_version(void) { return CCD_ABI_VERSION; }
const char *ccd_describe(void) { return "newcomer 1.0 reno; options: cc=reno"; }

void *ccd_open(const ccd_config *cfg, char *err, size_t err_len) {
  if (cfg->options && *cfg->options && strcmp(cfg->options, "cc=reno")) {
    snprintf(err, err_len, "newcomer: unknown option in %s", cfg->options);
    return NULL;
  }
  ctl_t *c = calloc(1, sizeof *c);
  c->base = cfg->clock_base_us;
  reno_init(&c->r, cfg->max_datagram_size);
  return c;
}

int ccd_step(void *ctl, const ccd_event *ev, ccd_snapshot *out) {
  ctl_t *c = ctl;
  int64_t now = c->base + ev->now_us;
  uint64_t bif = ev->bytes_in_flight;
  uint32_t i;
  switch (ev->kind) {
  case CCD_SENT:
    reno_algorithm.on_sent(&c->r, ev->packets[0].bytes, now);
    bif += ev->packets[0].bytes;
    break;
  case CCD_ACKED:
    if ((ev->flags & CCD_FLAG_ECN_CE) && ev->n_packets)
      reno_algorithm.on_ecn(&c->r, c->base + ev->packets[ev->n_packets - 1].sent_us, now);
    for (i = 0; i < ev->n_packets; i++) {
      bif -= ev->packets[i].bytes;
      if (!ev->packets[i].app_limited)   /* RFC 9002 7.8: no growth when under-utilized */
        reno_algorithm.on_ack(&c->r, ev->packets[i].bytes, c->base + ev->packets[i].sent_us, now);
    }
    break;
  case CCD_LOST:
    for (i = 0; i < ev->n_packets; i++) bif -= ev->packets[i].bytes;
    if (ev->n_packets)
      reno_algorithm.on_loss(&c->r, c->base + ev->packets[ev->n_packets - 1].sent_us, now);
    break;
  case CCD_PERSISTENT_CONGESTION:
    reno_algorithm.on_persistent_congestion(&c->r, now);
    break;
  default:                               /* CCD_APP_IDLE, CCD_APP_DATA: conn.c does nothing */
    break;
  }
  memset(out, 0, sizeof *out);
  out->cwnd = c->r.cwnd;
  out->ssthresh = c->r.ssthresh == UINT64_MAX ? CCD_NONE : c->r.ssthresh;
  out->bytes_in_flight = bif;
  out->phase = CCD_PHASE_UNKNOWN;
  out->recovery_start_us = c->r.recovery_start == INT64_MIN ? CCD_NO_TIME : c->r.recovery_start - c->base;
  out->epoch_start_us = CCD_NO_TIME;
  out->w_max_bytes = NAN;
  out->k_us = NAN;
  return 0;
}

const char *ccd_last_error(void *ctl) { (void)ctl; return "newcomer: no error"; }
void ccd_close(void *ctl) { free(ctl); }
"""

BUILD_SH = """\
#!/bin/sh
# build.sh SRC_DIR OUT_DIR: the pinned src/reno.c, unmodified, and the adapter, one library.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
${CC:-cc} -shared -fPIC -O1 ${CCDIFF_EXTRA_CFLAGS:-} -I"$CCDIFF_INCLUDE" -I"$1/src" \\
  -o "$2/libccdiff_adapter.so" "$HERE/adapter.c" "$1/src/reno.c" -Wl,-z,defs ${CCDIFF_EXTRA_LDFLAGS:-}
"""

PROFILE = """\
stack = "newcomer"

[[deviation]]
id = "beta-three-quarters"
summary = "A congestion event keeps 3/4 of the window, not RFC 9002's half."
rfc = "RFC 9002 §7.3.2 (kLossReductionFactor 0.5)"
code = "src/reno.c:{event} (1.0)"
intent = {{ kind = "code-comment", cite = "src/reno.c:{beta} (1.0)", quote = "beta = 3/4, newcomer's own choice" }}
mechanism = "newcomer-three-quarters"
explains = ["shallow-reduction"]
tolerates = ["trajectory-divergence"]
observed = "congestion-event"
"""

MECHANISMS = '''\
"""newcomer's mechanism (a throwaway stack of tests/test_adding_a_stack.py)."""
from __future__ import annotations

from ccdiff.mechanisms import Mechanism, Occurrence


class NewcomerThreeQuarters(Mechanism):
    """A congestion event sets cwnd = ssthresh = max(3/4 cwnd, 2 datagrams) (src/reno.c)."""
    name = "newcomer-three-quarters"
    invariants = frozenset({{"shallow-reduction"}})
    rule = "src/reno.c:{event} (newcomer 1.0)"
    families = ("reno",)

    def explains(self, occ: Occurrence) -> bool:
        kept = max(occ.before.cwnd * 3 // 4, 2 * self.mds)
        return occ.after.cwnd == kept and occ.after.ssthresh == kept
'''

ENTRY_POINTS_PY = '''\
"""newcomer's controller interface: the callbacks of struct reno_ops (src/reno.h)."""
from __future__ import annotations

import re
from pathlib import Path

from ccdiff.entry_points import block


def members(src: Path) -> set[str]:
    body = block((src / "src" / "reno.h").read_text(), "typedef struct reno_ops {", "} reno_ops;")
    return set(re.findall(r"\\(\\*(\\w+)\\)\\s*\\(", body))
'''

CALLS = {"on_sent": "CCD_SENT, for the one packet sent", "on_ecn": "CCD_ACKED with ECN-CE, before its packets",
         "on_ack": "CCD_ACKED, per packet not sent app-limited", "on_loss": "CCD_LOST, with the largest lost packet",
         "on_persistent_congestion": "CCD_PERSISTENT_CONGESTION, after its CCD_LOST"}


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def _tarball(path: Path) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (("reno.h", RENO_H), ("reno.c", RENO_C), ("conn.c", CONN_C)):
            data = text.encode()
            info = tarfile.TarInfo(f"{STACK}-1.0/src/{name}")
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_stack(home: Path) -> Path:
    """implementations/newcomer/, everything docs/adding-a-stack.md asks of a stack folder."""
    folder = home / "implementations" / STACK
    folder.mkdir()
    archive = home / f"{STACK}-1.0.tar.gz"         # the pinned "release"
    sha = _tarball(archive)
    (folder / "stack.toml").write_text(
        f'name = "{STACK}"\nlanguage = "c"\ndescription = "a throwaway NewReno (tests/test_adding_a_stack.py)"\n'
        f'default_version = "1.0"\noptions = ["cc=reno"]\n\n[aliases]\n{STACK}-reno = "cc=reno"\n\n'
        f'[[versions]]\nversion = "1.0"\nurl = "{archive.as_uri()}"\nsha256 = "{sha}"\nsubdir = "{STACK}-1.0"\n')
    (folder / "build.sh").write_text(BUILD_SH)
    (folder / "adapter.c").write_text(ADAPTER_C)
    event, beta = _line(RENO_C, "static void congestion_event"), _line(RENO_C, "beta = 3/4")
    (folder / "profile.toml").write_text(PROFILE.format(event=f"{event}-{event + 6}", beta=beta))
    (folder / "mechanisms.py").write_text(MECHANISMS.format(event=f"{event}-{event + 6}"))
    (folder / "coverage.toml").write_text('controller_files = ["src/reno.c"]\n\n[not_driven]\n'
                                          'on_sent = "the controller does nothing on a send"\n')
    (folder / "provenance.toml").write_text(
        'upstream_repo = "https://example.org/newcomer"\nreport_to = "newcomer\'s tracker"\n'
        'report_url = "https://example.org/newcomer/issues"\n'
        'driven = "src/reno.c compiled alone; the adapter calls reno_algorithm as src/conn.c does."\n\n'
        '[versions."1.0"]\nupstream_tag = "v1.0"\npath_in_repo = ""\npackage = "a local tarball"\n')
    (folder / "entry_points.py").write_text(ENTRY_POINTS_PY)
    rows = [f"| `{name}` | `src/conn.c:{_line(CONN_C, f'reno_algorithm.{name}(')}` | delivered | {says} | "
            f"`adapter.c:{_line(ADAPTER_C, f'reno_algorithm.{name}(')}` |" for name, says in CALLS.items()]
    (folder / "entry-points.md").write_text(
        "# Entry points of newcomer 1.0\n\n`struct reno_ops` (src/reno.h), called by src/conn.c.\n\n"
        f"<!-- entry-points: {STACK} 1.0 -->\n"
        "| entry point | connection calls it | status | ccdiff delivers it | adapter |\n"
        "|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return folder


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    for name in COPIED:
        shutil.copytree(ROOT / name, home / name, ignore=shutil.ignore_patterns("__pycache__"))
    add_stack(home)
    return home


def env_of(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCDIFF_")}
    return dict(env, CCDIFF_HOME=str(home), CCDIFF_BUILD_DIR=str(home / "build"),
                CCDIFF_COVERAGE_BUILD_DIR=str(home / "coverage"), PYTHONPATH=str(ROOT))


def ccdiff(home: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccdiff", *args], cwd=home, env=env_of(home),
                          capture_output=True, text=True, timeout=timeout)


def pytest_in(home: Path, *args: str) -> subprocess.CompletedProcess:
    """This checkout's tests, run against the copy (CCDIFF_HOME): what they enumerate is its."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env=env_of(home), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(home):
    done = ccdiff(home, "build", STACK)
    assert done.returncode == 0, done.stdout + done.stderr
    return home


def test_stacks_lists_it(home):
    done = ccdiff(home, "stacks")
    assert done.returncode == 0, done.stderr
    assert re.search(rf"│ {STACK} +│ 1\.0 +│ no", done.stdout), done.stdout     # listed, not built yet


def test_build_builds_it_and_stacks_calls_it_current(built):
    assert (built / "build" / STACK / "1.0" / "libccdiff_adapter.so").is_file()
    rows = json.loads(ccdiff(built, "stacks", "--json").stdout)
    row = next(r for r in rows if r["stack"] == STACK)
    assert row["built"] and not row["stale"], row


def test_replay_runs_it_and_its_mechanism_explains_its_deviation(built, tmp_path):
    out = tmp_path / "r.json"
    done = ccdiff(built, "replay", "examples/repeated-losses.jsonl", "--stack", f"{STACK}-reno", "--json", str(out))
    assert done.returncode in (0, 1), done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert [s["stack"] for s in doc["stacks"]] == [f"{STACK}-reno"] and not doc["stacks"][0]["error"]
    mine = [f for f in doc["findings"] if f["stack"] == f"{STACK}-reno"]
    deviations = {f["invariant"] for f in mine if f["status"] == "deviation"}
    assert "shallow-reduction" in deviations, mine          # newcomer-three-quarters explained it
    assert not [f for f in mine if f["invariant"] == "shallow-reduction" and f["status"] != "deviation"]


def test_waivers_name_its_mechanism(home):
    done = ccdiff(home, "stacks", "--waivers", "--json")
    assert done.returncode == 0, done.stderr
    entry = next(e for e in json.loads(done.stdout) if e["stack"] == STACK)
    assert [(c["invariant"], c["mechanism"]) for c in entry["checked"]] == \
        [("shallow-reduction", "newcomer-three-quarters")]
    assert entry["checked"][0]["rule"].startswith("src/reno.c:")


def test_matrix_takes_it_by_default(built, tmp_path):
    out = tmp_path / "m.json"
    done = ccdiff(built, "matrix", "examples/death-spiral.jsonl", "examples/idle-restart.jsonl", "--json", str(out))
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert f"{STACK}-reno@1.0" in json.loads(out.read_text())["stacks"]


def test_replay_of_several_traces_says_matrix_in_one_line(built):
    done = ccdiff(built, "replay", "examples/death-spiral.jsonl", "examples/idle-restart.jsonl",
                  "--stack", f"{STACK}-reno")
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "replay takes one trace, not 2" in lines[0]
    assert (f"ccdiff matrix examples/death-spiral.jsonl examples/idle-restart.jsonl --stack {STACK}-reno"
            in lines[0])


def test_coverage_measures_its_controller_file(built, tmp_path):
    if not shutil.which("gcov"):
        pytest.skip("no gcov")
    out = tmp_path / "c.json"
    done = ccdiff(built, "coverage", STACK, "--examples", "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert list(doc["files"]) == ["src/reno.c"]
    assert 0 < doc["totals"]["examples"]["lines_covered"] <= doc["totals"]["examples"]["lines"]
    flagged = {r["function"] for r in doc["files"]["src/reno.c"]["uncovered"] if r["not_driven"]}
    assert flagged <= {"on_sent"}       # -O0 counts its line; not_driven comes from coverage.toml


def test_contract_tests_discover_it(built):
    """The tests that enumerate stacks, run against the copy: the newcomer's cases exist and pass
    (its entry points against its pinned source and adapter lines; its coverage, provenance
    and mechanism records), and the clock tests take its specs."""
    ids = pytest_in(built, "--collect-only", "tests/test_entry_points.py", "tests/adapters/test_clock.py")
    assert ids.returncode == 0, ids.stdout + ids.stderr
    for case in (f"test_every_upstream_member_is_classified[{STACK}-1.0]", f"test_cited_lines_show_the_entry_point[{STACK}]",
                 f"test_same_trace_same_snapshots_under_every_base[death-spiral.jsonl-{STACK}@1.0]",
                 f"test_snapshots_report_trace_time[{STACK}-reno@1.0]"):
        assert case in ids.stdout, case
    done = pytest_in(built, "tests/test_entry_points.py", "-k", STACK)
    assert done.returncode == 0 and re.search(r"\b3 passed", done.stdout), done.stdout + done.stderr
    done = pytest_in(built, "tests/test_entry_points.py::test_every_stack_has_a_table_for_its_pinned_versions",
                     "tests/test_coverage.py::test_every_stack_names_its_controller_files",
                     "tests/report/test_provenance.py::test_every_pinned_version_has_provenance",
                     "tests/report/test_provenance.py::test_report_to_comes_from_each_stack",
                     "tests/test_mechanisms.py::test_every_mechanism_names_its_upstream_rule")
    assert done.returncode == 0 and re.search(r"\b5 passed", done.stdout), done.stdout + done.stderr


def test_the_contract_tests_fail_when_the_folder_leaves_something_out(built, tmp_path):
    """Discovery is not vacuous: the same folder without its entry-points table fails the
    entry-points contract, naming the stack."""
    broken = tmp_path / "home"
    for name in COPIED:
        shutil.copytree(built / name, broken / name, ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "implementations" / STACK / "entry-points.md").unlink()
    done = pytest_in(broken, "tests/test_entry_points.py::test_every_stack_has_a_table_for_its_pinned_versions")
    assert done.returncode == 1 and STACK in done.stdout, done.stdout


def test_nothing_outside_the_folder_changed(built):
    """Everything above ran with the copy differing from this checkout by the new folder only
    (and the pinned tarball and build output beside it, which are no part of the tree)."""
    def differ(cmp: filecmp.dircmp, prefix: str) -> list:
        out = [f"{prefix}{n}" for n in cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files]
        for name, sub in cmp.subdirs.items():
            out += differ(sub, f"{prefix}{name}/")
        return out
    changed = []
    for name in COPIED:
        cmp = filecmp.dircmp(ROOT / name, built / name, ignore=["__pycache__"])
        changed += differ(cmp, f"{name}/")
    assert changed == [f"implementations/{STACK}"], changed
