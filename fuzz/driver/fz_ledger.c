/* The packet ledger: see fz_ledger.h and ccdiff/ledger.py. */
#include "fz_ledger.h"

#include <stdlib.h>
#include <string.h>

enum { ST_NONE, ST_FLIGHT, ST_LOST, ST_DONE };

void fz_ledger_init(fz_ledger *lg) { memset(lg, 0, sizeof(*lg)); }

void fz_ledger_free(fz_ledger *lg) {
  free(lg->state);
  free(lg->sent_us);
  free(lg->app_limited);
  free(lg->packets);
  free(lg->spurious);
  fz_ledger_init(lg);
}

void fz_ledger_reset(fz_ledger *lg, int64_t initial_rtt_us) {
  if (lg->cap) memset(lg->state, ST_NONE, lg->cap);
  lg->bytes_in_flight = 0;
  lg->has_sample = 0;
  /* RFC 9002 5.3: before the first sample. */
  lg->rtt = (ccd_rtt){0, initial_rtt_us, initial_rtt_us / 2, 0};
}

static void reserve_pn(fz_ledger *lg, uint64_t pn) {
  if (pn < lg->cap) return;
  size_t n = lg->cap ? lg->cap : 1024;
  while (n <= pn) n *= 2;
  lg->state = realloc(lg->state, n);
  lg->sent_us = realloc(lg->sent_us, n * sizeof(int64_t));
  lg->app_limited = realloc(lg->app_limited, n);
  if (!lg->state || !lg->sent_us || !lg->app_limited) abort();
  memset(lg->state + lg->cap, ST_NONE, n - lg->cap);
  lg->cap = n;
}

static ccd_packet *reserve(ccd_packet *p, size_t *cap, size_t n) {
  if (n <= *cap) return p;
  size_t c = *cap ? *cap : 64;
  while (c < n) c *= 2;
  p = realloc(p, c * sizeof(*p));
  if (!p) abort();
  *cap = c;
  return p;
}

static ccd_packet packet(const fz_ledger *lg, uint64_t pn) {
  return (ccd_packet){pn, lg->sent_us[pn], FZ_MAX_DATAGRAM_SIZE, lg->app_limited[pn]};
}

/* RFC 9002 5.2-5.3, integer microseconds, as ccdiff/ledger.py Rtt.update. */
static void rtt_update(fz_ledger *lg, int64_t latest, int64_t ack_delay) {
  ccd_rtt *r = &lg->rtt;
  r->latest_us = latest;
  if (!lg->has_sample) {
    lg->has_sample = 1;
    r->min_us = r->smoothed_us = latest;
    r->rttvar_us = latest / 2;
    return;
  }
  if (latest < r->min_us) r->min_us = latest; /* min_rtt ignores ack delay */
  int64_t adjusted = latest >= r->min_us + ack_delay ? latest - ack_delay : latest;
  int64_t diff = r->smoothed_us > adjusted ? r->smoothed_us - adjusted : adjusted - r->smoothed_us;
  r->rttvar_us = (3 * r->rttvar_us + diff) / 4;
  r->smoothed_us = (7 * r->smoothed_us + adjusted) / 8;
}

int fz_ledger_resolve(fz_ledger *lg, const fz_trace *tr, size_t i, ccd_event *out) {
  const fz_event *e = &tr->ev[i];
  memset(out, 0, sizeof(*out));
  out->kind = e->kind;
  out->now_us = e->t;
  out->bytes_in_flight = lg->bytes_in_flight; /* before this event */
  if (e->kind == FZ_SENT) {
    reserve_pn(lg, e->pn);
    if (lg->state[e->pn] != ST_NONE) return -1;
    lg->state[e->pn] = ST_FLIGHT;
    lg->sent_us[e->pn] = e->t;
    lg->app_limited[e->pn] = e->app_limited;
    lg->packets = reserve(lg->packets, &lg->cap_packets, 1);
    lg->packets[0] = packet(lg, e->pn);
    lg->bytes_in_flight += FZ_MAX_DATAGRAM_SIZE;
    out->flags = e->app_limited ? CCD_FLAG_APP_LIMITED : 0;
    out->packets = lg->packets;
    out->n_packets = 1;
  } else if (e->kind == FZ_ACK || e->kind == FZ_LOST) {
    const uint64_t *pns = tr->pns + e->first_pn;
    lg->packets = reserve(lg->packets, &lg->cap_packets, e->n_pns);
    lg->spurious = reserve(lg->spurious, &lg->cap_spurious, e->n_pns);
    uint32_t n = 0, s = 0;
    for (uint32_t k = 0; k < e->n_pns; k++) {
      uint64_t pn = pns[k];
      if (pn >= lg->cap) return -1;
      if (lg->state[pn] == ST_FLIGHT) {
        lg->packets[n++] = packet(lg, pn);
        lg->state[pn] = e->kind == FZ_ACK ? ST_DONE : ST_LOST;
      } else if (e->kind == FZ_ACK && lg->state[pn] == ST_LOST) {
        lg->spurious[s++] = packet(lg, pn); /* a late ACK of a packet declared lost */
        lg->state[pn] = ST_DONE;
      } else {
        return -1;
      }
    }
    lg->bytes_in_flight -= (uint64_t)n * FZ_MAX_DATAGRAM_SIZE;
    out->packets = lg->packets;
    out->n_packets = n;
    if (e->kind == FZ_ACK) {
      out->flags = e->ecn_ce ? CCD_FLAG_ECN_CE : 0;
      out->spurious = lg->spurious;
      out->n_spurious = s;
      out->ack_delay_us = e->ack_delay;
      const ccd_packet *largest = (s && (!n || lg->spurious[s - 1].pn > lg->packets[n - 1].pn))
                                      ? &lg->spurious[s - 1] : &lg->packets[n - 1];
      /* RFC 9002 5.1: a sample when the largest acknowledged is newly acknowledged. */
      rtt_update(lg, e->t - largest->sent_us, e->ack_delay);
    }
  }
  out->rtt = lg->rtt;
  return 0;
}
