/*
 * Inline 8-bit counters into AFL++'s map (see fz_counters.h).
 *
 * The sancov pass with -sanitizer-coverage-inline-8bit-counters bumps one byte
 * per edge in the instrumented library's __sancov_cntrs section, where the
 * trace-pc-guard build called __sanitizer_cov_trace_pc_guard -- through the PLT,
 * into the harness executable -- once per edge (8-23% of a Rust harness's time
 * under AFL++, docs/fuzzing.md).  The library's constructor registers its
 * section here; each counter gets a slot of AFL++'s map from AFL++'s own guard
 * allocator (__sanitizer_cov_trace_pc_guard_init: the slots the guards of the
 * same edges got), and fz_counters_fold adds the counts to the map.  The
 * counters wrap at 256 inside one input (a per-edge count that is an exact
 * multiple of 256 reads as not hit for that input); AFL++'s bucket for 128+
 * hits makes the rest alike.  Compiled by a plain compiler: AFL++'s pass would
 * take __afl_area_ptr for its own.  The C stacks' afl-clang-fast build has no
 * counters section: nothing registers and folding does nothing.
 */
#include "fz_counters.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void __sanitizer_cov_trace_pc_guard_init(uint32_t *start, uint32_t *stop);
extern uint8_t *__afl_area_ptr;

static struct {
  uint8_t *start;
  size_t n;
  uint32_t *slot;
} regions[16];
static size_t n_regions;

/* Called by the library's constructor, once per LLVM module (every module of a
 * library passes the same section): the first call registers it. */
void __sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop) {
  if (start >= stop) return;
  for (size_t i = 0; i < n_regions; i++)
    if (regions[i].start == start) return;
  if (n_regions == sizeof(regions) / sizeof(regions[0])) abort();
  size_t n = (size_t)(stop - start);
  uint32_t *slot = calloc(n, sizeof(*slot));
  if (!slot) abort();
  __sanitizer_cov_trace_pc_guard_init(slot, slot + n);
  regions[n_regions].start = start;
  regions[n_regions].n = n;
  regions[n_regions].slot = slot;
  n_regions++;
}

void fz_counters_fold(void) {
  uint8_t *map = __afl_area_ptr;
  for (size_t r = 0; r < n_regions; r++) {
    uint8_t *c = regions[r].start;
    const uint32_t *slot = regions[r].slot;
    size_t n = regions[r].n, i = 0;
    while (i < n) {
      size_t end = n - i >= 8 ? i + 8 : n;
      if (end - i == 8) {
        uint64_t word;
        memcpy(&word, c + i, 8);
        if (!word) {
          i = end;
          continue;
        }
      }
      for (; i < end; i++) {
        if (!c[i]) continue;
        unsigned v = map[slot[i]] + c[i];
        map[slot[i]] = v > 255 ? 255 : (uint8_t)v;
        c[i] = 0;
      }
    }
  }
}

/* A crash (a violation's abort(), a Rust abort, a signal in the stack) keeps the
 * edges of its run -- afl-fuzz tells crashes apart by them: fold, then the
 * default action.  (A run afl-fuzz kills for a timeout keeps none.) */
static void fold_then_die(int sig) {
  fz_counters_fold();
  signal(sig, SIG_DFL);
  raise(sig);
}

void fz_counters_arm(void) {
  /* Cleared, not folded: AFL++ may have mapped its shared map already, and what ran
   * before the fork server (fz_main.c's warm-up) is no input's coverage. */
  for (size_t r = 0; r < n_regions; r++) memset(regions[r].start, 0, regions[r].n);
  if (!n_regions) return;
  static const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = fold_then_die;
    sa.sa_flags = SA_NODEFER | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(sigs[i], &sa, NULL);
  }
}
