"""A stack adapter that misbehaves on purpose, for fault-injection tests.

`faulty` is built with gcc into a private CCDIFF_HOME.  Option `fault=` picks
what happens at t >= `at` microseconds (default 50 ms): crash (segfault),
opencrash (a segfault in ccd_open, before any event),
hang (sleeps forever), leak (keeps 4 MiB more on every event), garbage (a NaN/zero snapshot), refuse (ccd_step < 0),
or none (a well-behaved fixed window).
"""
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SOURCE = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ccdiff_adapter.h"

typedef struct { char fault[16]; int64_t at; } faulty;

uint32_t ccd_abi_version(void) { return CCD_ABI_VERSION; }
const char *ccd_describe(void) {
  return "faulty 1.0 (misbehaves on purpose); options: fault=crash|opencrash|hang|leak|garbage|refuse|none, at=US";
}
void *ccd_open(const ccd_config *cfg, char *err, size_t err_len) {
  faulty *f = calloc(1, sizeof *f);
  strcpy(f->fault, "none");
  f->at = 50000;
  const char *o = cfg->options;
  while (o && *o) {
    if (sscanf(o, "fault=%15[a-z]", f->fault) == 1) {}
    else if (sscanf(o, "at=%ld", &f->at) == 1) {}
    else { snprintf(err, err_len, "faulty: unknown option in %s", o); free(f); return NULL; }
    o = strchr(o, ',');
    if (o) o++;
  }
  if (!strcmp(f->fault, "opencrash")) { volatile int *p = 0; *p = 1; }
  return f;
}
int ccd_step(void *ctl, const ccd_event *ev, ccd_snapshot *out) {
  faulty *f = ctl;
  int late = ev->now_us >= f->at;
  if (late && !strcmp(f->fault, "crash")) { volatile int *p = 0; *p = 1; }
  if (late && !strcmp(f->fault, "hang")) { for (;;) sleep(1); }
  if (late && !strcmp(f->fault, "refuse")) return -1;
  if (late && !strcmp(f->fault, "leak")) { size_t n = 4u << 20; memset(malloc(n), 1, n); }
  memset(out, 0, sizeof *out);
  out->cwnd = 12000; out->ssthresh = CCD_NONE; out->bytes_in_flight = ev->bytes_in_flight;
  out->recovery_start_us = CCD_NO_TIME; out->epoch_start_us = CCD_NO_TIME;
  out->w_max_bytes = NAN; out->k_us = NAN;
  if (late && !strcmp(f->fault, "garbage")) { out->cwnd = 0; out->w_max_bytes = -INFINITY; }
  return 0;
}
const char *ccd_last_error(void *ctl) { return "faulty: refused the event on purpose"; }
void ccd_close(void *ctl) { free(ctl); }
"""


def install_faulty_stack(home: Path) -> None:
    """implementations/faulty + its built library under home (use as CCDIFF_HOME)."""
    stack = home / "implementations" / "faulty"
    stack.mkdir(parents=True, exist_ok=True)
    (stack / "stack.toml").write_text('name = "faulty"\nlanguage = "c"\ndefault_version = "1.0"\n'
                                      '[[versions]]\nversion = "1.0"\nurl = "none"\nsha256 = "none"\n')
    out = home / "build" / "faulty" / "1.0"
    out.mkdir(parents=True, exist_ok=True)
    src = home / "faulty.c"
    src.write_text(SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-I", str(REPO / "implementations" / "include"),
                    "-o", str(out / "libccdiff_adapter.so"), str(src), "-lm"], check=True)
