/*
 * The benchmark's event file (written by bench/bench_adapters.py), loaded into
 * an array of resolved ccd_event structs, packet pointers already set.
 *
 * Format, little-endian: "CCDEVT01", u64 n_events, u64 n_packets, then
 * n_events records of 72 bytes (u32 kind, u32 flags, i64 now_us,
 * u64 bytes_in_flight, u32 n_packets, u32 n_spurious, i64 ack_delay_us,
 * i64 rtt latest/smoothed/rttvar/min), then n_packets records of 24 bytes
 * (u64 pn, i64 sent_us, u32 bytes, u32 app_limited): each event's packets,
 * then its spurious packets, in event order.
 */
#ifndef BENCH_EVENTS_H
#define BENCH_EVENTS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ccdiff_adapter.h"

typedef struct bench_events {
  ccd_event *ev;
  size_t n;
  ccd_packet *pool;
  size_t n_packets;
} bench_events;

static void bench_die(const char *msg) {
  fprintf(stderr, "bench: %s\n", msg);
  exit(2);
}

/* Little-endian fields at |*at|, advancing it (x86-64 / aarch64 are LE). */
static void bench_take(const unsigned char **at, const unsigned char *end, void *p, size_t n) {
  if ((size_t)(end - *at) < n) bench_die("short event file");
  memcpy(p, *at, n);
  *at += n;
}

static bench_events bench_load(const char *path) {
  bench_events b;
  uint64_t n, np;
  FILE *f = fopen(path, "rb");
  if (f == NULL) bench_die("cannot open event file");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  unsigned char *buf = malloc(size > 0 ? (size_t)size : 1);
  if (buf == NULL || size < 24 || fread(buf, 1, (size_t)size, f) != (size_t)size)
    bench_die("cannot read event file");
  fclose(f);
  const unsigned char *at = buf + 8, *end = buf + size;
  if (memcmp(buf, "CCDEVT01", 8) != 0) bench_die("not a CCDEVT01 file");
  bench_take(&at, end, &n, 8);
  bench_take(&at, end, &np, 8);
  b.n = n;
  b.n_packets = np;
  b.ev = calloc(n ? n : 1, sizeof(ccd_event));
  b.pool = calloc(np ? np : 1, sizeof(ccd_packet));
  if (b.ev == NULL || b.pool == NULL) bench_die("out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    ccd_event *e = &b.ev[i];
    bench_take(&at, end, &e->kind, 4);
    bench_take(&at, end, &e->flags, 4);
    bench_take(&at, end, &e->now_us, 8);
    bench_take(&at, end, &e->bytes_in_flight, 8);
    bench_take(&at, end, &e->n_packets, 4);
    bench_take(&at, end, &e->n_spurious, 4);
    bench_take(&at, end, &e->ack_delay_us, 8);
    bench_take(&at, end, &e->rtt, 32);
    e->packets = e->n_packets ? &b.pool[k] : NULL;
    k += e->n_packets;
    e->spurious = e->n_spurious ? &b.pool[k] : NULL;
    k += e->n_spurious;
    if (k > np) bench_die("packet count mismatch");
  }
  if (k != np) bench_die("packet count mismatch");
  for (size_t i = 0; i < np; i++) {
    ccd_packet *p = &b.pool[i];
    bench_take(&at, end, &p->pn, 8);
    bench_take(&at, end, &p->sent_us, 8);
    bench_take(&at, end, &p->bytes, 4);
    bench_take(&at, end, &p->app_limited, 4);
  }
  free(buf);
  return b;
}

static double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One line of JSON on stdout: the fastest of the repetitions, and the final
 * controller state (so the caller can check bare and adapter agree). */
static void bench_report(size_t n, double best_s, uint64_t cwnd,
                         uint64_t ssthresh) {
  printf("{\"events\": %zu, \"seconds\": %.6f, \"events_per_s\": %.0f, "
         "\"cwnd\": %llu, \"ssthresh\": %llu}\n",
         n, best_s, (double)n / best_s, (unsigned long long)cwnd,
         (unsigned long long)ssthresh);
}

#endif
