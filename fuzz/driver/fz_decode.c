/* The fuzz decoder: see fz_decode.h and docs/fuzz-encoding.md. */
#include "fz_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return p;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  p = realloc(p, n * size);
  if (!p) abort();
  *cap = n;
  return p;
}

void fz_trace_init(fz_trace *tr) { memset(tr, 0, sizeof(*tr)); }

void fz_trace_free(fz_trace *tr) {
  free(tr->ev);
  free(tr->pns);
  free(tr->outstanding);
  free(tr->lost);
  fz_trace_init(tr);
}

static fz_event *push_event(fz_trace *tr, uint8_t kind) {
  tr->ev = grow(tr->ev, &tr->cap_ev, tr->n_ev + 1, sizeof(*tr->ev));
  fz_event *e = &tr->ev[tr->n_ev++];
  memset(e, 0, sizeof(*e));
  e->kind = kind;
  e->t = tr->now;
  return e;
}

static void op_send(fz_trace *tr, unsigned count, int app_limited) {
  for (unsigned i = 0; i < count; i++) {
    fz_event *e = push_event(tr, FZ_SENT);
    e->pn = tr->next_pn;
    e->app_limited = (uint8_t)app_limited;
    tr->outstanding = grow(tr->outstanding, &tr->cap_out, tr->n_out + 1, sizeof(fz_slot));
    tr->outstanding[tr->n_out++] = (fz_slot){tr->next_pn, tr->now};
    tr->next_pn++;
  }
}

/* Removes up to count slots after skipping skip (at most len-1) from pool;
 * appends their pns to tr->pns and returns how many were taken.  Also moves
 * now to at least BASE_RTT after the newest of them was sent. */
static size_t take(fz_trace *tr, fz_slot *pool, size_t *n_pool, size_t skip, size_t count,
                   fz_slot *taken) {
  size_t n = *n_pool;
  if (skip > (n ? n - 1 : 0)) skip = n ? n - 1 : 0;
  if (count > n - skip) count = n - skip;
  memcpy(taken, pool + skip, count * sizeof(fz_slot));
  memmove(pool + skip, pool + skip + count, (n - skip - count) * sizeof(fz_slot));
  *n_pool = n - count;
  tr->pns = grow(tr->pns, &tr->cap_pns, tr->n_pns + count, sizeof(*tr->pns));
  int64_t newest = INT64_MIN;
  for (size_t i = 0; i < count; i++) {
    tr->pns[tr->n_pns + i] = taken[i].pn;
    if (taken[i].sent > newest) newest = taken[i].sent;
  }
  /* An ACK or a loss comes at least one path RTT after the newest packet it
   * covers (loss detection needs a later ACK, RFC 9002 6.1). */
  if (count && newest + FZ_BASE_RTT_US > tr->now) tr->now = newest + FZ_BASE_RTT_US;
  return count;
}

/* RFC 9002 5.2-5.3 as ccdiff/ledger.py Rtt.update (and fz_ledger.c): the
 * sample of an ACK is now - the send time of its largest packet. */
static void rtt_sample(fz_trace *tr, int64_t largest_sent, int64_t ack_delay) {
  int64_t latest = tr->now - largest_sent;
  if (!tr->has_sample) {
    tr->has_sample = 1;
    tr->first_sample_t = tr->now;
    tr->min_us = tr->smoothed_us = latest;
    tr->rttvar_us = latest / 2;
    return;
  }
  if (latest < tr->min_us) tr->min_us = latest;
  int64_t adjusted = latest >= tr->min_us + ack_delay ? latest - ack_delay : latest;
  int64_t diff = tr->smoothed_us > adjusted ? tr->smoothed_us - adjusted : adjusted - tr->smoothed_us;
  tr->rttvar_us = (3 * tr->rttvar_us + diff) / 4;
  tr->smoothed_us = (7 * tr->smoothed_us + adjusted) / 8;
}

/* How many slots of an ascending pool have lo < pn < hi. */
static size_t count_inside(const fz_slot *pool, size_t n, uint64_t lo, uint64_t hi) {
  size_t a = 0, b = n, first, end;
  while (a < b) { size_t m = (a + b) / 2; if (pool[m].pn <= lo) a = m + 1; else b = m; }
  first = a;
  b = n;
  while (a < b) { size_t m = (a + b) / 2; if (pool[m].pn < hi) a = m + 1; else b = m; }
  end = a;
  return end - first;
}

/* Packet numbers are 0, 1, 2, ...: each is outstanding, declared lost or
 * acknowledged, so the acknowledged ones between lo and hi are the rest. */
static int acked_between(const fz_trace *tr, uint64_t lo, uint64_t hi) {
  uint64_t between = hi - lo - 1;
  return between > count_inside(tr->outstanding, tr->n_out, lo, hi) + count_inside(tr->lost, tr->n_lost, lo, hi);
}

static int in_batch(const fz_slot *batch, size_t n, uint64_t pn) {
  for (size_t i = 0; i < n; i++)
    if (batch[i].pn == pn) return 1;
  return 0;
}

/* RFC 9002 7.6.2, as ccdiff/reach.py persistent_congestion_failure: two lost
 * packets sent after the first RTT sample, one of them just declared, more than
 * the persistent congestion duration apart with nothing acknowledged between. */
static int establishes_persistent_congestion(const fz_trace *tr, const fz_slot *batch, size_t n_batch) {
  if (!tr->has_sample) return 0;
  int64_t var4 = 4 * tr->rttvar_us;
  int64_t duration = (tr->smoothed_us + (var4 > FZ_GRANULARITY_US ? var4 : FZ_GRANULARITY_US) +
                      FZ_MAX_ACK_DELAY_US) * FZ_PC_THRESHOLD;
  size_t count = 0;
  int any_new = 0;
  int64_t longest = 0, run_start = 0;
  uint64_t prev_pn = 0;
  for (size_t i = 0; i < tr->n_lost; i++) {
    const fz_slot *p = &tr->lost[i];
    if (p->sent <= tr->first_sample_t) continue;
    int is_new = in_batch(batch, n_batch, p->pn);
    any_new |= is_new;
    if (count++ == 0 || acked_between(tr, prev_pn, p->pn)) {
      run_start = p->sent;
    } else if (is_new && p->sent - run_start > longest) {
      longest = p->sent - run_start;
    }
    prev_pn = p->pn;
  }
  return count >= 2 && any_new && longest > duration;
}

static fz_slot scratch[16]; /* an op takes at most 8 packets; ack_all uses op_ack_all */

static void op_ack(fz_trace *tr, int lost_pool, size_t skip, size_t count, int64_t delay, int ecn) {
  fz_slot *pool = lost_pool ? tr->lost : tr->outstanding;
  size_t *n_pool = lost_pool ? &tr->n_lost : &tr->n_out;
  if (*n_pool == 0) return;
  size_t first = tr->n_pns;
  size_t n = take(tr, pool, n_pool, skip, count, scratch);
  tr->n_pns += n;
  fz_event *e = push_event(tr, FZ_ACK);
  e->first_pn = first;
  e->n_pns = (uint32_t)n;
  e->ack_delay = delay;
  e->ecn_ce = (uint8_t)ecn;
  rtt_sample(tr, scratch[n - 1].sent, delay);
}

/* ACK every outstanding packet (ack_all, round, ack_and_send). */
static void op_ack_all(fz_trace *tr, int64_t delay, int ecn) {
  if (tr->n_out == 0) return;
  size_t first = tr->n_pns;
  tr->pns = grow(tr->pns, &tr->cap_pns, tr->n_pns + tr->n_out, sizeof(*tr->pns));
  int64_t newest = INT64_MIN;
  for (size_t i = 0; i < tr->n_out; i++) {
    tr->pns[first + i] = tr->outstanding[i].pn;
    if (tr->outstanding[i].sent > newest) newest = tr->outstanding[i].sent;
  }
  if (newest + FZ_BASE_RTT_US > tr->now) tr->now = newest + FZ_BASE_RTT_US;
  tr->n_pns += tr->n_out;
  fz_event *e = push_event(tr, FZ_ACK);
  e->first_pn = first;
  e->n_pns = (uint32_t)tr->n_out;
  e->ack_delay = delay;
  e->ecn_ce = (uint8_t)ecn;
  rtt_sample(tr, tr->outstanding[tr->n_out - 1].sent, delay);
  tr->n_out = 0;
}

static void op_lose(fz_trace *tr, size_t skip, size_t count, int persistent) {
  if (tr->n_out == 0) return;
  size_t first = tr->n_pns;
  size_t n = take(tr, tr->outstanding, &tr->n_out, skip, count, scratch);
  tr->n_pns += n;
  fz_event *e = push_event(tr, FZ_LOST);
  e->first_pn = first;
  e->n_pns = (uint32_t)n;
  /* Merge into the ascending lost pool. */
  tr->lost = grow(tr->lost, &tr->cap_lost, tr->n_lost + n, sizeof(fz_slot));
  for (size_t i = 0; i < n; i++) {
    size_t j = tr->n_lost;
    while (j > 0 && tr->lost[j - 1].pn > scratch[i].pn) {
      tr->lost[j] = tr->lost[j - 1];
      j--;
    }
    tr->lost[j] = scratch[i];
    tr->n_lost++;
  }
  /* The p bit asks; RFC 9002 7.6.2 decides (on the state now, as a timer loss). */
  if (persistent && establishes_persistent_congestion(tr, scratch, n)) push_event(tr, FZ_PERSISTENT);
}

static int64_t wait_us(unsigned w) {
  if (w < 128) return (int64_t)(w + 1) * 100;
  if (w < 224) return (int64_t)(w - 127) * 10000;
  return (int64_t)(w - 223) * 1000000;
}

void fz_decode(fz_trace *tr, const uint8_t *data, size_t len) {
  tr->n_ev = tr->n_pns = tr->n_out = tr->n_lost = 0;
  tr->now = 0;
  tr->next_pn = 0;
  tr->has_sample = 0;
  tr->first_sample_t = tr->smoothed_us = tr->rttvar_us = tr->min_us = 0;
  for (size_t i = 0; i + 1 < len && tr->n_ev < FZ_MAX_EVENTS; i += 2) {
    unsigned a = data[i + 1];
    switch (data[i] % 8) {
    case 0: op_send(tr, (a & 0x0F) + 1, !!(a & 0x80)); break;
    case 1: tr->now += wait_us(a); break;
    case 2: op_ack(tr, 0, (a >> 3) & 3, (a & 7) + 1, ((a >> 5) & 3) * 1000, !!(a & 0x80)); break;
    case 3: op_lose(tr, (a >> 3) & 3, (a & 7) + 1, !!(a & 0x80)); break;
    case 4: op_ack(tr, 1, 0, (a & 3) + 1, 0, 0); break;
    case 5: op_ack_all(tr, ((a >> 1) & 3) * 1000, a & 1); break;
    case 6:
      op_send(tr, (a & 0x0F) + 1, 0);
      tr->now += (int64_t)(a >> 4) * 1000;
      op_ack_all(tr, 0, 0);
      break;
    case 7: /* the death-spiral step: drain the pipe and refill it at once */
      op_ack_all(tr, 0, 0);
      op_send(tr, (a & 7) + 1, !!(a & 0x80));
      break;
    }
  }
  /* Cut to exactly MAX_EVENTS; a persistent congestion always directly
   * follows its loss, so the cut never orphans one. */
  if (tr->n_ev > FZ_MAX_EVENTS) tr->n_ev = FZ_MAX_EVENTS;
}

static void dump_pns(FILE *f, const uint64_t *pns, uint32_t n) {
  fputc('[', f);
  for (uint32_t i = 0; i < n;) {
    uint32_t j = i;
    while (j + 1 < n && pns[j + 1] == pns[j] + 1) j++;
    if (i) fputs(", ", f);
    if (i == j)
      fprintf(f, "%llu", (unsigned long long)pns[i]);
    else
      fprintf(f, "[%llu, %llu]", (unsigned long long)pns[i], (unsigned long long)pns[j]);
    i = j + 1;
  }
  fputc(']', f);
}

void fz_dump_jsonl(const fz_trace *tr, const char *name, void *file) {
  FILE *f = file;
  fprintf(f, "{\"ccdiff_trace\": 1, \"max_datagram_size\": %d", FZ_MAX_DATAGRAM_SIZE);
  if (name && *name) fprintf(f, ", \"name\": \"%s\"", name); /* callers pass plain names */
  fputs("}\n", f);
  for (size_t i = 0; i < tr->n_ev; i++) {
    const fz_event *e = &tr->ev[i];
    fprintf(f, "{\"t\": %lld, \"ev\": ", (long long)e->t);
    switch (e->kind) {
    case FZ_SENT:
      fprintf(f, "\"sent\", \"pn\": %llu, \"bytes\": %d%s}\n", (unsigned long long)e->pn,
              FZ_MAX_DATAGRAM_SIZE, e->app_limited ? ", \"app_limited\": true" : "");
      break;
    case FZ_ACK:
      fputs("\"ack\", \"pns\": ", f);
      dump_pns(f, tr->pns + e->first_pn, e->n_pns);
      if (e->ack_delay) fprintf(f, ", \"ack_delay\": %lld", (long long)e->ack_delay);
      fputs(e->ecn_ce ? ", \"ecn_ce\": true}\n" : "}\n", f);
      break;
    case FZ_LOST:
      fputs("\"lost\", \"pns\": ", f);
      dump_pns(f, tr->pns + e->first_pn, e->n_pns);
      fputs("}\n", f);
      break;
    default:
      fputs("\"persistent_congestion\"}\n", f);
    }
  }
}
