/*
 * The invariants cheap enough to check in-process, on every snapshot:
 * exactly ccdiff/invariants.py's definitions of
 *   numeric-error          (checked first; the others are skipped if it fires),
 *   cwnd-below-minimum     (RFC 9002 7.2: below 2 * max_datagram_size),
 *   future-recovery-start  (RFC 9438 4.2: recovery or epoch start > now),
 * plus adapter-error (ccd_step refused a valid event: a Rust panic, say).
 */
#ifndef FZ_CHECK_H
#define FZ_CHECK_H

#include "ccdiff_adapter.h"

enum {
  FZ_INV_NONE = 0,
  FZ_INV_NUMERIC = 1 << 0,
  FZ_INV_CWND_MIN = 1 << 1,
  FZ_INV_FUTURE = 1 << 2,
  FZ_INV_ADAPTER = 1 << 3,
  FZ_INV_ALL = 0xF
};

/* The first invariant in `enabled` that the snapshot breaks, or FZ_INV_NONE.
 * detail (may be NULL) receives a one-line explanation. */
unsigned fz_check(const ccd_event *ev, const ccd_snapshot *snap, uint32_t max_datagram_size,
                  unsigned enabled, char *detail, size_t detail_len);
const char *fz_invariant_name(unsigned inv);
/* "future-recovery-start,numeric-error" -> mask; -1 on an unknown name. */
int fz_parse_invariants(const char *list, unsigned *mask);

#endif
