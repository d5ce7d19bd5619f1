/*
 * Inline 8-bit counters for AFL++ (fz_counters.c): the Rust stacks' AFL++ build
 * (ccdiff/fuzzing/harness.py RUST_SANCOV_AFL) counts edges in its own bytes;
 * these put them into AFL++'s map.  Linked into the AFL++ harness only.
 */
#ifndef FZ_COUNTERS_H
#define FZ_COUNTERS_H

/* Adds every registered counter to its AFL++ map slot (saturating at 255) and
 * clears it: after each input, in the persistent loop. */
void fz_counters_fold(void);

/* Clears the counters (what ran before the fork server is no input's) and, if
 * any are registered, folds before a crash signal's default action too. */
void fz_counters_arm(void);

#endif
