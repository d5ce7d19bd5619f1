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


def _wait_arg(gap: int) -> int:
    """The longest wait (wait_us) that does not pass `gap` microseconds (gap >= 100)."""
    if gap >= 1_000_000:
        return 223 + min(32, gap // 1_000_000)
    if gap >= 10_000:
        return 127 + min(96, gap // 10_000)
    return min(127, gap // 100 - 1)


class _Encoder:
    """Operations chosen event by event, each applied to a decoder at once, so the encoder
    always knows the state the next operation starts from (time, packet numbers, pools)."""

    def __init__(self):
        self.decoder = _Decoder()
        self.out = bytearray()
        self.pns: dict = {}          # the trace's packet number -> the decoder's
        self.dropped: dict = {}      # what the encoding could not express -> how often

    def emit(self, code: int, arg: int) -> None:
        self.out += bytes((code, arg))
        self.decoder.op(code, arg)

    def drop(self, what: str, count: int = 1) -> None:
        if count:
            self.dropped[what] = self.dropped.get(what, 0) + count

    def advance(self, t: int) -> None:
        """Waits up to `t` (to 100 us below it: the finest wait)."""
        while t - self.decoder.now >= 100:
            self.emit(OP_WAIT, _wait_arg(t - self.decoder.now))

    def send(self, sent: list) -> None:
        """Packets sent at one instant with one app-limited mark: 16 per operation."""
        self.advance(sent[0].t)
        for start in range(0, len(sent), 16):
            chunk = sent[start:start + 16]
            for k, ev in enumerate(chunk):
                self.pns[ev.pn] = self.decoder.next_pn + k
            self.emit(OP_SEND, (0x80 if chunk[0].app_limited else 0) | (len(chunk) - 1))

    def spurious(self, wanted: list) -> list:
        """A late ACK of packets declared lost (OP_SPURIOUS: the oldest lost ones, 4 per
        operation); returns the rest of `wanted`."""
        lost = [pn for pn, _ in self.decoder.lost]
        lost_set = set(lost)
        late = [pn for pn in wanted if pn in lost_set]
        oldest = 0
        while oldest < len(late) and late[oldest] == lost[oldest]:
            oldest += 1
        for start in range(0, oldest, 4):
            run = min(4, oldest - start)
            self.emit(OP_SPURIOUS, run - 1)
        done = set(late[:oldest])
        return [pn for pn in wanted if pn not in done]

    def cover(self, code: int, t: int, pns: tuple, last_flags: int) -> None:
        """ACK (OP_ACK) or declare lost (OP_LOSE) the decoder's packets for `pns`: runs of at
        most 8 that start at most 3 packets into the outstanding pool; a packet further in
        cannot be named and is left out.  last_flags: bits of the last operation (ECN-CE,
        ack delay, persistent congestion)."""
        self.advance(t)
        named = sorted(self.pns[pn] for pn in pns if pn in self.pns)
        wanted = self.spurious(named) if code == OP_ACK else named
        pool = [pn for pn, _ in self.decoder.outstanding]
        outstanding = set(pool)
        late = len(named) - len(wanted)
        wanted = [pn for pn in wanted if pn in outstanding]
        self.drop("packet not outstanding", len(pns) - late - len(wanted))
        if code == OP_ACK and wanted and wanted == pool:
            # every outstanding packet: one ack_all (its bits: .....dde)
            dd, ecn = (last_flags >> 5) & 0x03, last_flags >> 7
            self.emit(OP_ACK_ALL, dd << 1 | ecn)
            return
        # Runs of consecutive pool entries, at their pool index.  When every run starts at
        # most 3 in, they go out largest first (removing a later run shifts no earlier one):
        # the first frame then carries the largest acknowledged, as the trace's one frame did,
        # which a loss declared before it needs (RFC 9002 §6.1).  Otherwise in ascending
        # order, each run's index counted after the earlier ones left the pool.
        at = {pn: i for i, pn in enumerate(pool)}
        runs, k = [], 0
        while k < len(wanted):
            start = at[wanted[k]]
            run = 1
            while (run < 8 and k + run < len(wanted) and start + run < len(pool)
                   and pool[start + run] == wanted[k + run]):
                run += 1
            runs.append((start, run))
            k += run
        if all(start <= 3 for start, _ in runs):
            ops = sorted(runs, reverse=True)
        else:
            ops, removed = [], 0
            for start, run in runs:
                if start - removed > 3:
                    self.drop("packet too far into the outstanding pool", run)
                    continue
                ops.append((start - removed, run))
                removed += run
        for n, (skip, run) in enumerate(ops):
            self.emit(code, (last_flags if n == len(ops) - 1 else 0) | skip << 3 | (run - 1))


def encode(trace: Trace) -> tuple:
    """(bytes the decoder turns into an approximation of TRACE, what it left out): a seed
    for the fuzzers from a trace written by hand, a closed-loop run or a stack's own
    connection (qlog import).  The encoding is coarser than a trace: 1200-byte packets,
    waits in steps (0.1 ms, 10 ms, 1 s), an ACK at least BASE_RTT_US after the newest packet
    it covers, ACK delays in whole ms up to 3, an ACK frame that is not every outstanding
    packet split into runs, no application idle/data marks and no late ACK of a lost
    packet other than the oldest lost ones; the decoded trace is causally consistent
    whatever it drops."""
    enc = _Encoder()
    events, i = trace.events, 0
    while i < len(events):
        ev = events[i]
        if isinstance(ev, Sent):
            j = i
            while j < len(events) and isinstance(events[j], Sent) and events[j].t == ev.t \
                    and events[j].app_limited == ev.app_limited:
                j += 1
            enc.send(list(events[i:j]))
            i = j
            continue
        if isinstance(ev, Ack):
            delay = min(3, round(ev.ack_delay / 1000))
            enc.cover(OP_ACK, ev.t, ev.pns, (0x80 if ev.ecn_ce else 0) | delay << 5)
        elif isinstance(ev, Lost):
            persistent = i + 1 < len(events) and isinstance(events[i + 1], PersistentCongestion)
            enc.cover(OP_LOSE, ev.t, ev.pns, 0x80 if persistent else 0)
            i += persistent
        else:
            enc.drop(type(ev).__name__)
        i += 1
    return bytes(enc.out), enc.dropped
