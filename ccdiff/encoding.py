"""The binary fuzz encoding: every byte string decodes to a valid event stream.

docs/fuzz-encoding.md is the reference; fuzz/vectors/ holds bytes -> JSONL
pairs that every decoder (this one, the C harness decoder) must reproduce.

The input is read as two-byte operations (opcode, argument); a trailing odd
byte is ignored.  The decoder keeps the sender's state (time, next packet
number, packets outstanding, packets declared lost) and only emits events
that are causally consistent: ACKs and losses name outstanding packets, an
ACK comes at least BASE_RTT_US after the newest packet it covers was sent,
persistent congestion follows a loss and only when RFC 9002 §7.6.2 lets the
sender establish it (ccdiff/reach.py, judged on the decoder's own RFC 9002 §5
estimate as loss detection by the timer would).  An operation that cannot apply
(an ACK with nothing outstanding) emits nothing.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from .reach import DEFAULT_MAX_ACK_DELAY_US, persistent_congestion_failure
from .rtt import Rtt
from .trace import DEFAULT_INITIAL_RTT_US, MAX_TIME_US, Ack, Header, Lost, PersistentCongestion, Sent, Trace

MAX_DATAGRAM_SIZE = 1200
BASE_RTT_US = 10_000      # the path's propagation RTT: the Cloudflare test's 10 ms
MAX_EVENTS = 100_000      # keeps one input's replay bounded

OP_SEND, OP_WAIT, OP_ACK, OP_LOSE, OP_SPURIOUS, OP_ACK_ALL, OP_ROUND, OP_ACK_AND_SEND = range(8)
OP_NAMES = ("send", "wait", "ack", "lose", "spurious", "ack_all", "round", "ack_and_send")


def wait_us(arg: int) -> int:
    """0-127: 0.1-12.8 ms in 0.1 ms steps; 128-223: 10-960 ms; 224-255: 1-32 s."""
    if arg < 128:
        return (arg + 1) * 100
    if arg < 224:
        return (arg - 127) * 10_000
    return (arg - 223) * 1_000_000


class _Decoder:
    def __init__(self):
        self.now = 0
        self.next_pn = 0
        self.outstanding: list = []   # (pn, sent_t), ascending pn
        self.lost: list = []          # (pn, sent_t), ascending pn
        self.events: list = []
        self.rtt = Rtt(DEFAULT_INITIAL_RTT_US)   # the validator's and ledger's estimate
        self.first_sample_t = None

    def send(self, count: int, app_limited: bool) -> None:
        for _ in range(count):
            self.events.append(Sent(self.now, self.next_pn, MAX_DATAGRAM_SIZE, app_limited))
            self.outstanding.append((self.next_pn, self.now))
            self.next_pn += 1

    def _take(self, pool: list, skip: int, count: int) -> list:
        skip = min(skip, max(len(pool) - 1, 0))
        chosen = pool[skip:skip + count]
        del pool[skip:skip + count]
        return chosen

    def _at_least_rtt_after(self, packets: list) -> None:
        self.now = max(self.now, max(sent for _, sent in packets) + BASE_RTT_US)

    def ack(self, skip: int, count: int, ack_delay: int, ecn_ce: bool, pool=None) -> None:
        pool = self.outstanding if pool is None else pool
        if not pool:
            return
        packets = self._take(pool, skip, count)
        self._at_least_rtt_after(packets)
        self.events.append(Ack(self.now, tuple(pn for pn, _ in packets), ack_delay, ecn_ce))
        self.rtt.update(self.now - max(packets)[1], ack_delay)   # the largest acknowledged's sample
        if self.first_sample_t is None:
            self.first_sample_t = self.now

    def lose(self, skip: int, count: int, persistent: bool) -> None:
        if not self.outstanding:
            return
        packets = self._take(self.outstanding, skip, count)
        self._at_least_rtt_after(packets)   # loss detection needs a later ACK (RFC 9002 §6.1)
        self.events.append(Lost(self.now, tuple(pn for pn, _ in packets)))
        self.lost.extend(packets)
        self.lost.sort()
        if persistent and self._establishes_persistent_congestion(packets):
            self.events.append(PersistentCongestion(self.now))

    def _establishes_persistent_congestion(self, batch: list) -> bool:
        """RFC 9002 §7.6.2 on the state now; the `p` bit of an op that fails it is ignored."""
        return persistent_congestion_failure(
            self.lost, {pn for pn, _ in batch}, self.first_sample_t, self.rtt.smoothed, self.rtt.rttvar,
            DEFAULT_MAX_ACK_DELAY_US, self._acked_between) is None

    def _acked_between(self, lo: int, hi: int) -> bool:
        # Packet numbers are 0, 1, 2, ...: each is outstanding, declared lost or acknowledged,
        # so the acknowledged ones between lo and hi are the rest (fz_decode.c counts the same).
        def inside(pool):
            return bisect_left(pool, (hi, -1)) - bisect_right(pool, (lo, MAX_TIME_US))
        return hi - lo - 1 - inside(self.outstanding) - inside(self.lost) > 0

    def op(self, code: int, arg: int) -> None:
        code %= 8
        if code == OP_SEND:
            self.send((arg & 0x0F) + 1, bool(arg & 0x80))
        elif code == OP_WAIT:
            self.now += wait_us(arg)
        elif code == OP_ACK:
            self.ack((arg >> 3) & 0x03, (arg & 0x07) + 1, ((arg >> 5) & 0x03) * 1000, bool(arg & 0x80))
        elif code == OP_LOSE:
            self.lose((arg >> 3) & 0x03, (arg & 0x07) + 1, bool(arg & 0x80))
        elif code == OP_SPURIOUS:
            self.ack(0, (arg & 0x03) + 1, 0, False, pool=self.lost)
        elif code == OP_ACK_ALL:
            self.ack(0, len(self.outstanding), ((arg >> 1) & 0x03) * 1000, bool(arg & 0x01))
        elif code == OP_ROUND:
            self.send((arg & 0x0F) + 1, False)
            self.now += (arg >> 4) * 1000
            self.ack(0, len(self.outstanding), 0, False)
        elif code == OP_ACK_AND_SEND:
            # The death-spiral step: an ACK drains the pipe and the sender refills it
            # at the same instant.
            self.ack(0, len(self.outstanding), 0, False)
            self.send((arg & 0x07) + 1, bool(arg & 0x80))


def decode(data: bytes, name: str = "fuzz") -> Trace:
    decoder = _Decoder()
    for i in range(0, len(data) - 1, 2):
        if len(decoder.events) >= MAX_EVENTS:
            break
        decoder.op(data[i], data[i + 1])
    # Cutting at MAX_EVENTS can drop a persistent congestion but never orphan one:
    # it always directly follows its loss.
    events = decoder.events[:MAX_EVENTS]
    return Trace(Header(MAX_DATAGRAM_SIZE, name=name), events, source=name)
