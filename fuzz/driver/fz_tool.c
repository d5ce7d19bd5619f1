/*
 * fz_tool: the C decoder and ledger on their own, for the vector test.
 *   fz_tool trace FILE.bin [NAME]   canonical JSONL (fuzz/vectors/NAME.jsonl)
 *   fz_tool resolve FILE.bin        one line per resolved event:
 *     kind t bif flags delay | pkts pn:sent:bytes:al ... | spurious ... | rtt l s v m
 */
#include <stdio.h>
#include <string.h>

#include "fz_decode.h"
#include "fz_ledger.h"

static unsigned char input[1 << 20];

static void packets(const ccd_packet *p, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    printf(" %llu:%lld:%u:%u", (unsigned long long)p[i].pn, (long long)p[i].sent_us, p[i].bytes,
           p[i].app_limited);
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "trace") && strcmp(argv[1], "resolve"))) {
    fprintf(stderr, "usage: fz_tool trace|resolve FILE.bin [NAME]\n");
    return 2;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f) {
    perror(argv[2]);
    return 2;
  }
  size_t len = fread(input, 1, sizeof(input), f);
  fclose(f);
  fz_trace tr;
  fz_trace_init(&tr);
  fz_decode(&tr, input, len);
  if (!strcmp(argv[1], "trace")) {
    fz_dump_jsonl(&tr, argc > 3 ? argv[3] : "", stdout);
    return 0;
  }
  fz_ledger lg;
  fz_ledger_init(&lg);
  fz_ledger_reset(&lg, FZ_INITIAL_RTT_US);
  for (size_t i = 0; i < tr.n_ev; i++) {
    ccd_event ev;
    if (fz_ledger_resolve(&lg, &tr, i, &ev) < 0) {
      fprintf(stderr, "fz_tool: event %zu names a packet the ledger does not hold\n", i);
      return 1;
    }
    printf("%u %lld %llu %u %lld |", ev.kind, (long long)ev.now_us, (unsigned long long)ev.bytes_in_flight,
           ev.flags, (long long)ev.ack_delay_us);
    packets(ev.packets, ev.n_packets);
    printf(" |");
    packets(ev.spurious, ev.n_spurious);
    printf(" | %lld %lld %lld %lld\n", (long long)ev.rtt.latest_us, (long long)ev.rtt.smoothed_us,
           (long long)ev.rtt.rttvar_us, (long long)ev.rtt.min_us);
  }
  return 0;
}
