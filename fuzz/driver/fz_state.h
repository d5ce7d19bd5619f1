/*
 * State feedback: the controller's behaviour as coverage (issue 36 item 3).
 *
 * Code coverage tells an engine when an input runs new code in the stack; it does not
 * tell it when the same code computes a window it never computed before.  A bug such as
 * ngtcp2's idle inflation runs the same lines whether the pause before a round trip is
 * 5 ms or 5 s: only the window's growth differs, so the input that shows it adds no edge
 * and never reaches the corpus that triage judges.  fz_state_step counts, after each
 * ACK, one slot per (phase, growth per acknowledged byte, how long the pipe was empty
 * before this flight); after each loss, whether RFC 9002 §6.1 would declare it, by the
 * time threshold or not, and whether it emptied the pipe; on a send after a loss emptied
 * the pipe, whether §6.1 would declare that loss and how long the pipe stayed empty
 * (quiche 0.30.0's timer-loss recovery start).  The array is read by the
 * engine as coverage: 8-bit counters that
 * AFL++ (fz_counters.c) and honggfuzz (libhfuzz) register through
 * __sanitizer_cov_8bit_counters_init from a constructor (compiled with
 * -DFZ_STATE_COUNTERS_INIT), and
 * libFuzzer's extra counters (-DFZ_LIBFUZZER).  Built without either (plain, OSS-Fuzz),
 * the counts go nowhere.
 */
#ifndef FZ_STATE_H
#define FZ_STATE_H

#include <stdio.h>

#include "ccdiff_adapter.h"

/* Before each input: no pipe history, no window yet. */
void fz_state_reset(void);
/* After each event the stack took: its snapshot after it. */
void fz_state_step(const ccd_event *ev, const ccd_snapshot *after);
/* The slots this input hit, "slot:count" (CCDIFF_FUZZ_STATE=1, for tests): after an ACK
 * (phase x 6 + growth class) x 5 + idle class; after a loss 120 + 4 x declared + 2 x timer
 * + empties; a send after a loss emptied the pipe 128 + 4 x declared + idle class (at most 3). */
void fz_state_print(FILE *out);

#endif
