/*
 * ngd_rtb: the part of ngtcp2's retransmission buffer (lib/ngtcp2_rtb.h
 * struct ngtcp2_rtb) that congestion control depends on, for one packet
 * number space (application data) and cc_pkt_num = 0.
 *
 * Entries are real ngtcp2_rtb_entry structs so that ngtcp2_rst_on_pkt_sent
 * and ngtcp2_rst_update_rate_sample read and write them as in ngtcp2.
 * Sorted by ascending packet number (ngtcp2's ksl is descending; only
 * iteration direction differs).  Removed entries are tombstoned and
 * compacted on the next add, so entry pointers stay valid until then.
 */
#ifndef NGD_RTB_H
#define NGD_RTB_H

#include <stddef.h>
#include <stdint.h>

#include "ngtcp2_rtb.h"

/* Tombstone; a bit ngtcp2_rtb.h:58-85 does not use. */
#define NGD_RTB_ENTRY_FLAG_REMOVED 0x8000U

typedef struct ngd_rtb {
  ngtcp2_rtb_entry *ents;
  size_t head; /* ents[0..head) are all removed */
  size_t len;
  size_t cap;
  /* ngtcp2_rtb.num_lost_pkts: entries declared lost still kept. */
  size_t num_lost_pkts;
  /* ngtcp2_rtb.largest_acked_tx_pkt_num */
  int64_t largest_acked_tx_pkt_num;
} ngd_rtb;

void ngd_rtb_init(ngd_rtb *rtb);
void ngd_rtb_free(ngd_rtb *rtb);

/* Appends a copy of |ent|.  Returns -1 if its packet number does not
   exceed every earlier one, -2 on allocation failure. */
int ngd_rtb_add(ngd_rtb *rtb, const ngtcp2_rtb_entry *ent);

/* The entry with packet number |pkt_num|, NULL if absent or removed. */
ngtcp2_rtb_entry *ngd_rtb_find(ngd_rtb *rtb, int64_t pkt_num);

/* Drops |ent| (acknowledged, or a stale lost entry). */
void ngd_rtb_remove(ngd_rtb *rtb, ngtcp2_rtb_entry *ent);

/* ngtcp2_rtb_remove_excessive_lost_pkt (ngtcp2_rtb.c:1208): keep at most
   |n| lost entries, dropping the oldest. */
void ngd_rtb_remove_excessive_lost_pkt(ngd_rtb *rtb, size_t n);

/* ngtcp2_rtb_remove_expired_lost_pkt (ngtcp2_rtb.c:1238): drop lost entries
   declared lost at least |timeout| before |ts|, oldest first. */
void ngd_rtb_remove_expired_lost_pkt(ngd_rtb *rtb, ngtcp2_duration timeout,
                                     ngtcp2_tstamp ts);

#endif /* !defined(NGD_RTB_H) */
