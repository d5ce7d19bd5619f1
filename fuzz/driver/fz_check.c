/* In-process invariant checks: see fz_check.h and ccdiff/invariants.py. */
#include "fz_check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define HUGE_VALUE 9007199254740992.0 /* 2**53, invariants.py HUGE */

static const struct {
  unsigned bit;
  const char *name;
} NAMES[] = {{FZ_INV_NUMERIC, "numeric-error"},
             {FZ_INV_CWND_MIN, "cwnd-below-minimum"},
             {FZ_INV_FUTURE, "future-recovery-start"},
             {FZ_INV_ADAPTER, "adapter-error"}};

const char *fz_invariant_name(unsigned inv) {
  for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++)
    if (NAMES[i].bit == inv) return NAMES[i].name;
  return "none";
}

int fz_parse_invariants(const char *list, unsigned *mask) {
  *mask = 0;
  while (list && *list) {
    const char *end = strchr(list, ',');
    size_t len = end ? (size_t)(end - list) : strlen(list);
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++)
      if (strlen(NAMES[i].name) == len && !strncmp(NAMES[i].name, list, len)) bit = NAMES[i].bit;
    if (!bit) return -1;
    *mask |= bit;
    list = end ? end + 1 : list + len;
  }
  return 0;
}

/* _bad_number(value, lo): not finite, below lo, or beyond 2**53.  K's lo is -2**53: RFC 9438
 * §4.2 eq. 2 gives a negative K when the stage starts above W_max (invariants.py). */
static int bad_u64(uint64_t v, uint64_t lo) { return v < lo || (double)v > HUGE_VALUE; }
static int bad_double(double v, double lo) { return !isnan(v) && (!isfinite(v) || v < lo || v > HUGE_VALUE); }

unsigned fz_check(const ccd_event *ev, const ccd_snapshot *s, uint32_t mds, unsigned enabled,
                  char *detail, size_t len) {
  char dummy[1];
  if (!detail) detail = dummy, len = sizeof(dummy);
  /* NaN W_max / K means "absent" (the ABI); CCD_NONE ssthresh means infinite. */
  if (bad_u64(s->cwnd, 1) || (s->ssthresh != CCD_NONE && bad_u64(s->ssthresh, 1)) ||
      bad_double(s->w_max_bytes, 0) || bad_double(s->k_us, -HUGE_VALUE)) {
    snprintf(detail, len, "cwnd=%llu ssthresh=%llu w_max=%g K=%g", (unsigned long long)s->cwnd,
             (unsigned long long)s->ssthresh, s->w_max_bytes, s->k_us);
    return enabled & FZ_INV_NUMERIC;
  }
  if ((enabled & FZ_INV_CWND_MIN) && s->cwnd < 2ull * mds) {
    snprintf(detail, len, "cwnd %llu < minimum window %u", (unsigned long long)s->cwnd, 2 * mds);
    return FZ_INV_CWND_MIN;
  }
  if ((enabled & FZ_INV_FUTURE) &&
      ((s->recovery_start_us != CCD_NO_TIME && s->recovery_start_us > ev->now_us) ||
       (s->epoch_start_us != CCD_NO_TIME && s->epoch_start_us > ev->now_us))) {
    snprintf(detail, len, "recovery start %lld, epoch start %lld, now %lld",
             (long long)s->recovery_start_us, (long long)s->epoch_start_us, (long long)ev->now_us);
    return FZ_INV_FUTURE;
  }
  return FZ_INV_NONE;
}
