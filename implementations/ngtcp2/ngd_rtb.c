/* ngd_rtb: see ngd_rtb.h. */
#include "ngd_rtb.h"

#include <stdlib.h>
#include <string.h>

void ngd_rtb_init(ngd_rtb *rtb) {
  memset(rtb, 0, sizeof(*rtb));
  rtb->largest_acked_tx_pkt_num = -1; /* ngtcp2_rtb.c ngtcp2_rtb_init */
}

void ngd_rtb_free(ngd_rtb *rtb) { free(rtb->ents); }

static int is_removed(const ngtcp2_rtb_entry *ent) {
  return (ent->flags & NGD_RTB_ENTRY_FLAG_REMOVED) != 0;
}

static int is_lost(const ngtcp2_rtb_entry *ent) {
  return (ent->flags & NGTCP2_RTB_ENTRY_FLAG_LOST_RETRANSMITTED) != 0;
}

static void advance_head(ngd_rtb *rtb) {
  while (rtb->head < rtb->len && is_removed(&rtb->ents[rtb->head])) {
    ++rtb->head;
  }
}

static void compact(ngd_rtb *rtb) {
  size_t i, n = 0;

  for (i = rtb->head; i < rtb->len; ++i) {
    if (!is_removed(&rtb->ents[i])) {
      rtb->ents[n++] = rtb->ents[i];
    }
  }
  rtb->head = 0;
  rtb->len = n;
}

int ngd_rtb_add(ngd_rtb *rtb, const ngtcp2_rtb_entry *ent) {
  ngtcp2_rtb_entry *p;
  size_t cap;

  if (rtb->len && rtb->ents[rtb->len - 1].hd.pkt_num >= ent->hd.pkt_num) {
    return -1;
  }

  if (rtb->len == rtb->cap) {
    compact(rtb);
  }

  if (rtb->len == rtb->cap) {
    cap = rtb->cap ? rtb->cap * 2 : 64;
    p = realloc(rtb->ents, cap * sizeof(*p));
    if (p == NULL) {
      return -2;
    }
    rtb->ents = p;
    rtb->cap = cap;
  }

  rtb->ents[rtb->len++] = *ent;

  return 0;
}

ngtcp2_rtb_entry *ngd_rtb_find(ngd_rtb *rtb, int64_t pkt_num) {
  size_t lo = rtb->head, hi = rtb->len, mid;

  while (lo < hi) {
    mid = lo + (hi - lo) / 2;
    if (rtb->ents[mid].hd.pkt_num < pkt_num) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }

  if (lo == rtb->len || rtb->ents[lo].hd.pkt_num != pkt_num ||
      is_removed(&rtb->ents[lo])) {
    return NULL;
  }

  return &rtb->ents[lo];
}

void ngd_rtb_remove(ngd_rtb *rtb, ngtcp2_rtb_entry *ent) {
  if (is_lost(ent)) {
    --rtb->num_lost_pkts;
  }
  ent->flags |= NGD_RTB_ENTRY_FLAG_REMOVED;
  advance_head(rtb);
}

void ngd_rtb_remove_excessive_lost_pkt(ngd_rtb *rtb, size_t n) {
  size_t i;

  for (i = rtb->head; i < rtb->len && rtb->num_lost_pkts > n; ++i) {
    if (!is_removed(&rtb->ents[i]) && is_lost(&rtb->ents[i])) {
      ngd_rtb_remove(rtb, &rtb->ents[i]);
    }
  }
}

void ngd_rtb_remove_expired_lost_pkt(ngd_rtb *rtb, ngtcp2_duration timeout,
                                     ngtcp2_tstamp ts) {
  size_t i;
  ngtcp2_rtb_entry *ent;

  for (i = rtb->head; i < rtb->len && rtb->num_lost_pkts; ++i) {
    ent = &rtb->ents[i];
    if (is_removed(ent) || !is_lost(ent)) {
      continue;
    }
    /* ngtcp2_rtb.c: stops at the oldest lost entry not yet expired */
    if (ts - ent->lost_ts < timeout) {
      return;
    }
    ngd_rtb_remove(rtb, ent);
  }
}
