/*
 * Events/s through an adapter's C ABI: dlopen the .so, then a tight loop of
 * ccd_step over the pre-built array of resolved events (no Python).
 *
 *   adapter_loop LIB.so EVENTS.bin REPS [OPTIONS]
 *
 * Each repetition opens a fresh controller; the fastest is reported.
 */
#include <dlfcn.h>

#include "events.h"

typedef void *(*open_fn)(const ccd_config *, char *, size_t);
typedef int (*step_fn)(void *, const ccd_event *, ccd_snapshot *);
typedef const char *(*err_fn)(void *);
typedef void (*close_fn)(void *);

int main(int argc, char **argv) {
  if (argc < 4) bench_die("usage: adapter_loop LIB.so EVENTS.bin REPS [OPTIONS]");
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) bench_die(dlerror());
  open_fn ccd_open = (open_fn)dlsym(lib, "ccd_open");
  step_fn ccd_step = (step_fn)dlsym(lib, "ccd_step");
  err_fn ccd_last_error = (err_fn)dlsym(lib, "ccd_last_error");
  close_fn ccd_close = (close_fn)dlsym(lib, "ccd_close");
  if (!ccd_open || !ccd_step || !ccd_last_error || !ccd_close) bench_die("missing ccd_* symbol");

  bench_events b = bench_load(argv[2]);
  int reps = atoi(argv[3]);
  ccd_config cfg = {1200, 25000, 333000, argc > 4 ? argv[4] : "", CCD_DEFAULT_CLOCK_BASE_US};
  ccd_snapshot snap = {0};
  double best = 1e30;
  char err[256];

  for (int r = 0; r < reps; r++) {
    void *ctl = ccd_open(&cfg, err, sizeof(err));
    if (ctl == NULL) bench_die(err);
    double t0 = bench_now();
    for (size_t i = 0; i < b.n; i++) {
      if (ccd_step(ctl, &b.ev[i], &snap) != 0) {
        fprintf(stderr, "event %zu: %s\n", i, ccd_last_error(ctl));
        return 1;
      }
    }
    double dt = bench_now() - t0;
    if (dt < best) best = dt;
    ccd_close(ctl);
  }
  bench_report(b.n, best, snap.cwnd, snap.ssthresh);
  return 0;
}
