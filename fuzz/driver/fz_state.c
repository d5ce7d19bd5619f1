/* State feedback: see fz_state.h. */
#include "fz_state.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* After an ACK: 4 phases x 6 growth classes x 5 idle classes = 120 slots.  After a loss
 * (LOSS_SLOTS, 8): one RFC 9002 §6.1 would declare or not, by the time threshold or not,
 * emptying the pipe or not.  A send after a loss emptied the pipe (SEND_SLOTS, 8): that
 * loss one §6.1 would declare or not, by how long the pipe stayed empty.  The "would
 * declare" bit matters because an engine keeps one crash per coverage: a first crash on a
 * loss no connection declares (nothing acknowledged after it) would otherwise stand for
 * every later one, the strict ones included. */
#define ACK_SLOTS 120
#define LOSS_SLOTS ACK_SLOTS
#define SEND_SLOTS (LOSS_SLOTS + 8)
#define SLOTS (SEND_SLOTS + 8)

#ifdef FZ_LIBFUZZER
__attribute__((used, section("__libfuzzer_extra_counters")))
#endif
static uint8_t counters[SLOTS];

#ifdef FZ_STATE_COUNTERS_INIT
void __sanitizer_cov_8bit_counters_init(uint8_t *start, uint8_t *stop);
#endif

/* A constructor, as the instrumented library's own registration is: AFL++ hands out map
 * slots before its fork server starts, and refuses any asked for later. */
#ifdef FZ_STATE_COUNTERS_INIT
__attribute__((constructor)) static void fz_state_register(void) {
  __sanitizer_cov_8bit_counters_init(counters, counters + SLOTS);
}
#endif

static struct {
  int64_t emptied_us; /* when the pipe last became empty, -1: never (or not empty now) */
  int64_t idle_us;    /* how long it was empty before the current flight's first send */
  uint64_t cwnd;      /* the window before this event, 0 before the first */
  int emptied_by_loss; /* the pipe's last emptying was a loss (1), one §6.1 declares (2) */
  int64_t largest_acked; /* packet number, -1: none yet */
} st;

void fz_state_reset(void) {
  memset(counters, 0, sizeof(counters)); /* the engines read them after each input */
  st.emptied_us = 0; /* a connection starts with nothing in flight */
  st.idle_us = 0;
  st.cwnd = 0;
  st.emptied_by_loss = 0;
  st.largest_acked = -1;
}

/* The pause before this flight against the RTT: none, under 1, under 4, under 64 smoothed
 * RTTs, longer (RFC 9438 §5.8's application-limited periods that idle-inflation judges). */
static unsigned idle_class(int64_t idle_us, int64_t srtt_us) {
  if (srtt_us < 1) srtt_us = 1;
  if (idle_us <= 0) return 0;
  if (idle_us < srtt_us) return 1;
  if (idle_us < 4 * srtt_us) return 2;
  if (idle_us < 64 * srtt_us) return 3;
  return 4;
}

/* The window's change on one ACK per byte acknowledged: a cut, none, under 0.1, under 1/3
 * (CUBIC's usual pace and below), under 2/3 (towards the 1.5x-per-round-trip bound),
 * above (slow start's pace). */
static unsigned growth_class(uint64_t before, uint64_t after, uint64_t acked) {
  if (after < before) return 0;
  uint64_t grew = after - before;
  if (grew == 0 || acked == 0) return 1;
  if (grew * 10 < acked) return 2;
  if (grew * 3 < acked) return 3;
  if (grew * 3 < 2 * acked) return 4;
  return 5;
}

static void bump(unsigned slot) {
  if (counters[slot] < 255) counters[slot]++;
}

static uint64_t bytes_of(const ccd_packet *packets, uint32_t n) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < n; i++) sum += packets[i].bytes;
  return sum;
}

void fz_state_step(const ccd_event *ev, const ccd_snapshot *after) {
  /* ev->bytes_in_flight is the flight before the event (fz_ledger.c). */
  if (ev->kind == CCD_SENT) {
    if (ev->bytes_in_flight == 0 && st.emptied_us >= 0) {
      st.idle_us = ev->now_us - st.emptied_us;
      st.emptied_us = -1;
      if (st.emptied_by_loss) {
        unsigned idle = idle_class(st.idle_us, ev->rtt.smoothed_us);
        bump(SEND_SLOTS + (st.emptied_by_loss - 1) * 4 + (idle < 3 ? idle : 3));
      }
    }
  } else if (ev->kind == CCD_ACKED || ev->kind == CCD_LOST) {
    uint64_t gone = bytes_of(ev->packets, ev->n_packets);
    int empties = gone >= ev->bytes_in_flight, declared = 0;
    if (ev->kind == CCD_ACKED && ev->n_packets) {
      int64_t largest = (int64_t)ev->packets[ev->n_packets - 1].pn;
      if (largest > st.largest_acked) st.largest_acked = largest;
    }
    if (ev->kind == CCD_ACKED && st.cwnd) {
      unsigned phase = after->phase <= CCD_PHASE_RECOVERY ? after->phase : 0;
      bump((phase * 6 + growth_class(st.cwnd, after->cwnd, gone)) * 5 +
           idle_class(st.idle_us, ev->rtt.smoothed_us));
    } else if (ev->kind == CCD_LOST && ev->n_packets) {
      /* RFC 9002 §6.1: the newest lost packet was sent before an acknowledged one, and is
       * kPacketThreshold (3) below the largest acknowledged or was sent 9/8 x
       * max(smoothed_rtt, latest_rtt) ago (§6.1.2: the time threshold, a loss timer's). */
      const ccd_packet *newest = &ev->packets[ev->n_packets - 1];
      int64_t rtt = ev->rtt.smoothed_us > ev->rtt.latest_us ? ev->rtt.smoothed_us : ev->rtt.latest_us;
      int timer = (ev->now_us - newest->sent_us) * 8 >= 9 * rtt;
      declared = st.largest_acked > (int64_t)newest->pn &&
                 (st.largest_acked >= (int64_t)newest->pn + 3 || timer);
      bump(LOSS_SLOTS + declared * 4 + timer * 2 + empties);
    }
    if (empties && st.emptied_us < 0) {
      st.emptied_us = ev->now_us;
      st.emptied_by_loss = ev->kind == CCD_LOST ? 1 + declared : 0;
    }
  }
  st.cwnd = after->cwnd;
}

void fz_state_print(FILE *out) {
  fprintf(out, "ccdiff-fuzz: state slots");
  for (unsigned i = 0; i < SLOTS; i++)
    if (counters[i]) fprintf(out, " %u:%u", i, counters[i]);
  fprintf(out, "\n");
}
