/*
 * The engine floor of bench/bench_fuzz.py speed: fz_main.c's loop (AFL++) or
 * libhfuzz's (honggfuzz) around an input function that does nothing.  Its
 * execs/s is the most an engine reaches on this machine at that moment,
 * whatever the harness: its fork server, signals, pipes and map work alone.
 */
#include <stddef.h>
#include <stdint.h>

#include "fz_harness.h"

int fz_one_input(const uint8_t *data, size_t len) {
  (void)data;
  (void)len;
  return 0;
}

int fz_warm_up(const uint8_t *data, size_t len) { return fz_one_input(data, len); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) { return fz_one_input(data, len); }
