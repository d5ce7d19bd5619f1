/*
 * The in-process harness: decode one input (docs/fuzz-encoding.md), drive a
 * stack adapter (ccdiff_adapter.h, linked in) through the ledger's resolved
 * events, check fz_check.h's invariants after every step, and abort() on a
 * violation so AFL++ and honggfuzz record a crash.
 *
 * Environment (read once):
 *   CCDIFF_FUZZ_OPTIONS     the stack options of the SPEC, e.g. "idle_fix=off"
 *   CCDIFF_FUZZ_INVARIANTS  comma list of invariants that abort (default: all four)
 *   CCDIFF_FUZZ_NO_ABORT=1  report the violation on stderr and return 1 instead
 */
#ifndef FZ_HARNESS_H
#define FZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* 0: clean; 1: a violation (only with CCDIFF_FUZZ_NO_ABORT=1, else abort). */
int fz_one_input(const uint8_t *data, size_t len);

/* Runs DATA once, its violations neither printed nor aborting: AFL++'s harness
 * does this before its fork server starts (fz_main.c), so every forked child
 * starts with the adapter's and the stack's one-time set-up done (environment,
 * Rust's lazy statics, libm's CPU feature probe).  Returns fz_one_input's 0/1. */
int fz_warm_up(const uint8_t *data, size_t len);

#endif
