"""ccdiff adapter for aioquic's congestion controllers, in process (pure Python).

`aioquic.quic.congestion.cubic.CubicCongestionControl` and `.reno.RenoCongestionControl`
from the pinned sdist, driven in the order aioquic's `QuicPacketRecovery` calls them.
"recovery.py:N" is aioquic-1.7.2/src/aioquic/quic/recovery.py, "connection.py:N"
quic/connection.py, "cubic.py:N" / "reno.py:N" / "base.py:N" quic/congestion/.
build.sh copies this file to BUILD/ccdiff_adapter.py and the congestion modules to
BUILD/upstream/aioquic/; ccdiff/pyadapter.py loads it (the Python form of
implementations/include/ccdiff_adapter.h, docs/adapters.md).

Imports: the congestion modules need nothing of aioquic but `..packet_builder.QuicSentPacket`,
and only as a type annotation (base.py:5, cubic.py:4, reno.py:3).  The real
packet_builder.py pulls in the `_buffer` C extension, tls.py (cryptography, pyOpenSSL,
service_identity) and crypto.py, none of which the controller runs.  So the modules are
imported under a private package name (never the `aioquic` a user may have installed),
from the build folder only, with `quic.packet_builder` provided here: a QuicSentPacket
with upstream's fields (packet_builder.py:32-46).  build.sh refuses a release whose
congestion modules import anything else.

Per ACK frame, `QuicPacketRecovery.on_ack_received` (recovery.py:253-343) does, in order:
  1. largest_acked = the frame's largest; space.largest_acked_packet = max (recovery.py:265-270);
  2. for every newly acknowledged packet, ascending: `cc.on_packet_acked(packet, now)`
     (recovery.py:275-288);
  3. nothing newly acked: return, no loss detection (recovery.py:294-296);
  4. if the frame's largest is newly acked: the RTT sample (recovery.py:298-323), then
     `cc.on_rtt_measurement(now, rtt=latest_rtt)` with the raw sample (recovery.py:326);
  5. loss detection, `_detect_loss` (recovery.py:335, 433-463) -> `_on_packets_lost`:
     `cc.on_packets_lost(now, packets)` then, if persistent congestion,
     `cc.on_persistent_congestion()` (recovery.py:573-576).
So aioquic hands the ACK's packets to the controller BEFORE it runs loss detection
(as quinn does; RFC 9002 A.7 does the reverse).  ccdiff delivers CCD_LOST before the
CCD_ACKED that reveals it: the loss is held back and applied in step 5 of the ACK at the
same time after which aioquic's own rule (packet threshold 3 or 9/8 x max(latest,
smoothed) RTT, recovery.py:437-452) finds it (`loss_applied_with_ack`, stack.toml).  Its
own snapshot is what the loss timer would leave (`on_loss_detection_timeout` ->
`_detect_loss`, recovery.py:345-348, which may declare persistent congestion too); a
held-back loss that no ACK at its instant reveals is committed through that path.  Except
the PTO's: aioquic's reschedule_data declares the oldest ack-eliciting packet lost with
congestion_event=False and sends a probe (recovery.py:407-431), and its qlog logs that as
packet_lost; one such loss (the oldest outstanding packet, above the largest acknowledged
one) followed by a send within 1 ms reaches the controller as on_packets_expired
(`_congestion`).

Sends: the connection's `_flush_builder` stamps `packet.sent_time = now` and calls
`QuicPacketRecovery.on_packet_sent` (connection.py:1597-1619; recovery.py:353-367), which
calls `cc.on_packet_sent(packet)` for an in-flight packet.  The send loop never fills more
than the window: `builder.max_flight_bytes = congestion_window - bytes_in_flight`
(connection.py:588-590).  Cubic's idle rule lives there (cubic.py:149-155): a send 2 s or more after the
*send time* of the last acknowledged packet (`last_ack = packet.sent_time`, cubic.py:72)
resets the controller to its initial state (profile.toml `idle-reset-from-last-acked-send`).
The application's idle / data events reach no controller hook: aioquic's connection has
no app-limited signal (CCD_APP_IDLE / CCD_APP_DATA do nothing).  ECN counts of ACK_ECN
frames are read and dropped (connection.py:1916-1919) and aioquic sends no ECT: an
ecn_ce flag does nothing.

Clock: aioquic's time is float seconds of the event loop's monotonic clock
(connection.py passes `now`); stack time = (clock_base_us + trace us) / 1e6.  Cubic and
Reno start with `_congestion_recovery_start_time = 0.0` and Cubic with `last_ack = 0.0`
(cubic.py:37, 45; reno.py:22), "never" for a clock counted from boot.

Snapshot, from the controller's own fields: congestion_window, ssthresh (None in slow start
before any exit), bytes_in_flight (the controller keeps its own count, base.py:17),
_congestion_recovery_start_time, Cubic's _t_epoch, _W_max (bytes) and K (seconds), 0.0
meaning unset (cubic.py:64-68).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib
import importlib.util
import math
import sys
import types
from pathlib import Path
from typing import Any

ABI_VERSION = 4
OPTIONS = "cc=cubic|reno"
SENT, ACKED, LOST, PERSISTENT_CONGESTION, APP_IDLE, APP_DATA = 1, 2, 3, 4, 5, 6   # ccd_event_kind
PHASE_SLOW_START, PHASE_CONGESTION_AVOIDANCE, PHASE_RECOVERY = 1, 2, 3             # ccd_phase
MAX_CLOCK_BASE_US = 315_360_000_000_000                                            # CCD_MAX_CLOCK_BASE_US

# recovery.py:14-15: loss detection's thresholds.  Its max_ack_delay (recovery.py:142)
# is the peer's transport parameter, which the connection sets (connection.py:3324):
# the trace header's here (open's max_ack_delay_us; 25 ms when the peer sends none).
K_PACKET_THRESHOLD = 3
K_TIME_THRESHOLD = 9 / 8
# A send this soon after a timer loss with nothing between is the PTO's probe
# (kGranularity, RFC 9002 §6.1.2; the importer's window for an ACK's losses).
PROBE_WINDOW_US = 1000

_UPSTREAM: dict[str, tuple] = {}


@dataclasses.dataclass
class QuicSentPacket:
    """packet_builder.py:32-46's fields; the congestion modules read sent_time and
    sent_bytes only.  epoch and packet_type are tls.Epoch / QuicPacketType upstream
    (modules not imported here): the controller never reads them."""
    epoch: Any
    in_flight: bool
    is_ack_eliciting: bool
    is_crypto_packet: bool
    packet_number: int
    packet_type: Any
    sent_time: float | None = None
    sent_bytes: int = 0
    delivery_handlers: list = dataclasses.field(default_factory=list)
    quic_logger_frames: list = dataclasses.field(default_factory=list)


def _upstream(folder: str) -> tuple:
    """(cubic module, reno module, version) imported from BUILD/upstream/aioquic only."""
    root = Path(folder) / "upstream" / "aioquic"
    key = str(root.resolve())
    if key in _UPSTREAM:
        return _UPSTREAM[key]
    if not (root / "quic" / "congestion" / "cubic.py").is_file():
        raise ValueError(f"{root}: the pinned congestion modules are missing; rebuild: ccdiff build aioquic")
    pkg = "_ccdiff_aioquic_" + hashlib.sha256(key.encode()).hexdigest()[:12]
    for name, path in ((pkg, root), (f"{pkg}.quic", root / "quic"),
                       (f"{pkg}.quic.congestion", root / "quic" / "congestion")):
        spec = importlib.util.spec_from_file_location(name, path / "__init__.py",
                                                      submodule_search_locations=[str(path)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    stub = types.ModuleType(f"{pkg}.quic.packet_builder")
    stub.QuicSentPacket = QuicSentPacket
    sys.modules[stub.__name__] = stub
    cubic = importlib.import_module(f"{pkg}.quic.congestion.cubic")
    reno = importlib.import_module(f"{pkg}.quic.congestion.reno")
    _UPSTREAM[key] = (cubic, reno, sys.modules[pkg].__version__)
    return _UPSTREAM[key]


def describe() -> str:
    """ccd_describe: the version of the modules next to this file (the build folder)."""
    try:
        version = _upstream(str(Path(__file__).parent))[2]
    except (OSError, ValueError, ImportError) as exc:
        version = f"(modules not loadable: {exc})"
    return f"aioquic {version} cubic (pure Python, in process); options: {OPTIONS}"


def parse_options(text: str) -> bool:
    """True for Reno."""
    reno = False
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"option {item!r} is not key=value; accepted: {OPTIONS}")
        if key.strip() != "cc":
            raise ValueError(f"unknown option {key.strip()!r}; accepted: {OPTIONS}")
        if value not in ("cubic", "reno", "newreno"):
            raise ValueError(f"option cc: unknown value {value!r}; accepted: {OPTIONS}")
        reno = value != "cubic"
    return reno


def open(*, max_datagram_size: int, max_ack_delay_us: int, initial_rtt_us: int, options: str,  # noqa: A001
         clock_base_us: int, folder: str) -> "Controller":
    reno = parse_options(options)
    if not 1200 <= max_datagram_size <= 65527:
        raise ValueError(f"max_datagram_size {max_datagram_size} is not in 1200..65527")
    if not 0 < clock_base_us <= MAX_CLOCK_BASE_US:
        raise ValueError(f"clock_base_us {clock_base_us} is not in 1..{MAX_CLOCK_BASE_US}")
    cubic, reno_module, _ = _upstream(folder)
    return Controller(cubic, reno_module, reno, max_datagram_size, initial_rtt_us, max_ack_delay_us,
                      clock_base_us)


class _Pending:
    """A loss batch held back until the ACK at its instant (see top).  largest_acked:
    the largest acknowledged packet when the batch began (what the loss timer saw);
    oldest: each of its packets was the oldest one still outstanding when declared;
    acked: an ACK came at its instant."""
    __slots__ = ("t", "packets", "persistent", "largest_acked", "oldest", "acked")

    def __init__(self, t: int, largest_acked: int):
        self.t, self.packets, self.persistent, self.largest_acked = t, [], False, largest_acked
        self.oldest, self.acked = True, False


class Controller:
    def __init__(self, cubic, reno_module, reno: bool, mds: int, initial_rtt_us: int, max_ack_delay_us: int,
                 base_us: int):
        self.reno, self.base = reno, base_us
        self.max_ack_delay = max_ack_delay_us / 1e6     # QuicPacketRecovery.max_ack_delay, seconds
        # QuicPacketRecovery.__init__ -> create_congestion_control(name, max_datagram_size)
        # (recovery.py:163-165, base.py:113-123).
        factory = reno_module.RenoCongestionControl if reno else cubic.CubicCongestionControl
        self.cc = factory(max_datagram_size=mds)
        # QuicPacketSpace (recovery.py:73-75): largest_acked_packet starts at 0.
        self.sent: dict[int, QuicSentPacket] = {}
        self.largest_acked_packet = 0
        # QuicPacketRecovery's RTT state (recovery.py:153-159); the connection builds it
        # with initial_rtt from its configuration (the trace's initial RTT here).
        self.rtt_initial = initial_rtt_us / 1e6
        self.rtt_initialized = False
        self.rtt_latest = 0.0
        self.rtt_min = math.inf
        self.rtt_smoothed = 0.0
        self.rtt_variance = 0.0
        self.pending: _Pending | None = None
        self.last_us = 0

    def _s(self, us: int) -> float:
        return (self.base + us) / 1e6

    def _us(self, seconds: float):
        """A stack time back in trace microseconds; 0.0 is aioquic's "unset"."""
        return None if seconds == 0.0 else round(seconds * 1e6) - self.base

    # -- events -------------------------------------------------------------------------

    def step(self, ev) -> tuple:
        if ev.t < self.last_us:
            raise ValueError(f"time {ev.t} goes backwards (last {self.last_us})")
        pending = self.pending
        if pending is not None:
            # A held-back loss no ACK at its instant revealed was the loss timer's
            # (recovery.py:345-348).  A lost after persistent congestion at the same
            # time is a later detection: the collapsed batch goes first.
            same_burst = pending.t == ev.t and ev.kind in (ACKED, LOST, PERSISTENT_CONGESTION)
            if not same_burst or (ev.kind == LOST and pending.persistent):
                self.pending = None
                # The PTO's send_probe follows its "loss" at once (recovery.py:431).
                probe = ev.kind == SENT and ev.t - pending.t <= PROBE_WINDOW_US
                self._congestion(self.cc, pending, probe=probe)
        self.last_us = ev.t
        kind = ev.kind
        if kind == SENT:
            self._sent(ev)
        elif kind == LOST:
            self._lost(ev)
        elif kind == PERSISTENT_CONGESTION:
            if self.pending is None or self.pending.t != ev.t:
                raise ValueError("persistent_congestion must follow lost at the same time")
            self.pending.persistent = True
        elif kind == ACKED:
            self._acked(ev)
        elif kind not in (APP_IDLE, APP_DATA):
            raise ValueError(f"unknown event kind {kind}")
        if self.pending is not None:
            # What the loss timer would leave (provisional); the ACK redoes it in order.
            scratch = copy.deepcopy(self.cc)
            self._congestion(scratch, self.pending)
            return self._snapshot(scratch, ev.t)
        return self._snapshot(self.cc, ev.t)

    def _sent(self, ev) -> None:
        if len(ev.packets) != 1:
            raise ValueError(f"CCD_SENT carries {len(ev.packets)} packets, expected 1")
        pn, sent_us, size, _ = ev.packets[0]
        if pn in self.sent:
            raise ValueError(f"packet {pn} sent twice")
        # connection.py:1616-1619 stamps sent_time = now; every traced packet is an
        # ack-eliciting, in-flight 1-RTT packet.
        packet = QuicSentPacket(epoch=None, in_flight=True, is_ack_eliciting=True, is_crypto_packet=False,
                                packet_number=pn, packet_type=None, sent_time=self._s(ev.t), sent_bytes=size)
        self.sent[pn] = packet                      # recovery.py:354
        self.cc.on_packet_sent(packet=packet)       # recovery.py:358-367

    def _lost(self, ev) -> None:
        pending = self.pending
        if pending is None:
            pending = self.pending = _Pending(ev.t, self.largest_acked_packet)
        for pn, _, _, _ in ev.packets:
            packet = self.sent.pop(pn, None)        # _on_packets_lost: del sent_packets (recovery.py:547)
            if packet is None:
                raise ValueError(f"lost packet {pn} was never sent or is already gone")
            # self.sent is in send (= packet number) order, as sent_packets (recovery.py:354)
            pending.oldest = pending.oldest and (not self.sent or pn < next(iter(self.sent)))
            pending.packets.append(packet)

    def _congestion(self, cc, pending: _Pending, probe: bool = False) -> None:
        """_on_packets_lost's controller calls (recovery.py:570-576) at the batch's instant,
        packets in send order (sent_packets is in packet-number order, recovery.py:447).

        probe: no ACK at the instant revealed the batch (aioquic's timer did,
        on_loss_detection_timeout, recovery.py:345-351) and a send followed within 1 ms.
        The timer's _detect_loss declares only packets at or below the largest
        acknowledged one (recovery.py:448).  One packet above it, the oldest still
        outstanding, with no persistent congestion, then a send at once, is the PTO:
        reschedule_data declares the oldest ack-eliciting packet lost with
        congestion_event=False (recovery.py:407-427) and sends a probe (recovery.py:431),
        so the controller only drops its bytes, on_packets_expired (recovery.py:571-572).
        Only a lenient trace has such a loss (the trace's own rule: a loss needs a later
        acknowledged packet), e.g. an imported aioquic qlog, which logs the PTO's
        packet_lost like any other.  The snapshot at the loss itself, before the next
        event says, is the loss's."""
        packets = sorted(pending.packets, key=lambda p: p.packet_number)
        # A strict trace never matches: each of its losses has a later packet acknowledged
        # by then (before, or by the ACK at its instant).
        if (probe and len(packets) == 1 and pending.oldest and not pending.persistent and not pending.acked
                and packets[0].packet_number > max(pending.largest_acked, self.largest_acked_packet)):
            cc.on_packets_expired(packets=packets)
            return
        if packets:
            cc.on_packets_lost(now=self._s(pending.t), packets=packets)
            if pending.persistent:
                cc.on_persistent_congestion()

    def _acked(self, ev) -> None:
        now = self._s(ev.t)
        if self.pending is not None and self.pending.t == ev.t:
            self.pending.acked = True
        pns = [p[0] for p in ev.packets] + [p[0] for p in ev.spurious]
        if not pns:
            return
        largest_acked = max(pns)                    # ack_rangeset.bounds().stop - 1 (recovery.py:265)
        if largest_acked > self.largest_acked_packet:
            self.largest_acked_packet = largest_acked
        largest_newly_acked, largest_sent_time = None, None
        # Ranges ascending, packets in send order (recovery.py:275-288).  A packet declared
        # lost is gone from sent_packets (recovery.py:547): its late ACK does nothing.
        for pn in sorted(p[0] for p in ev.packets):
            packet = self.sent.pop(pn, None)
            if packet is None:
                raise ValueError(f"acked packet {pn} was never sent or is already gone")
            self.cc.on_packet_acked(packet=packet, now=now)
            largest_newly_acked, largest_sent_time = pn, packet.sent_time
        if largest_newly_acked is None:             # recovery.py:294-296
            return
        if largest_acked == largest_newly_acked:    # recovery.py:298-330 (all traced packets ack-eliciting)
            # recovery.py:299: now - sent_time on aioquic's own clock.  A trace imported from
            # its qlog carries that sample as the ACK's `rtt` (ev.stack_rtt, µs): the log's
            # send times lag the stack's by up to ~0.4 ms, enough to put the RTT monitor's
            # 1 ms sampling rule (base.py:92) on the other side and leave slow start an ACK
            # late (docs/qlog-import.md, "The ACK's time").  Else the trace's own difference.
            stack_rtt = getattr(ev, "stack_rtt", None)
            latest_rtt = now - largest_sent_time if stack_rtt is None else stack_rtt / 1e6
            ack_delay = min(ev.ack_delay / 1e6, self.max_ack_delay)
            self.rtt_latest = max(latest_rtt, 0.001)
            if self.rtt_latest < self.rtt_min:
                self.rtt_min = self.rtt_latest
            if self.rtt_latest > self.rtt_min + ack_delay:
                self.rtt_latest -= ack_delay
            if not self.rtt_initialized:
                self.rtt_initialized = True
                self.rtt_variance = latest_rtt / 2
                self.rtt_smoothed = latest_rtt
            else:
                self.rtt_variance = 3 / 4 * self.rtt_variance + 1 / 4 * abs(self.rtt_min - self.rtt_latest)
                self.rtt_smoothed = 7 / 8 * self.rtt_smoothed + 1 / 8 * self.rtt_latest
            self.cc.on_rtt_measurement(now=now, rtt=latest_rtt)
        # _detect_loss (recovery.py:335): the held-back batch, if aioquic's rule finds it
        # after this frame; otherwise it waits for a later frame at this instant or the timer.
        pending = self.pending
        if pending is not None and pending.t == ev.t and self._detects(pending, now):
            self.pending = None
            self._congestion(self.cc, pending)

    def _detects(self, pending: _Pending, now: float) -> bool:
        """_detect_loss's rule (recovery.py:437-452)."""
        loss_delay = K_TIME_THRESHOLD * (max(self.rtt_latest, self.rtt_smoothed)
                                         if self.rtt_initialized else self.rtt_initial)
        packet_threshold = self.largest_acked_packet - K_PACKET_THRESHOLD
        time_threshold = now - loss_delay
        return any(p.packet_number <= self.largest_acked_packet
                   and (p.packet_number <= packet_threshold or p.sent_time <= time_threshold)
                   for p in pending.packets)

    # -- snapshot -----------------------------------------------------------------------

    def _snapshot(self, cc, t: int) -> tuple:
        cwnd, ssthresh = cc.congestion_window, cc.ssthresh
        recovery = self._us(cc._congestion_recovery_start_time)
        # Phase as aioquic branches: slow start while ssthresh is None or cwnd < ssthresh
        # (cubic.py:74, reno.py:33); recovery while a packet sent now would still count
        # as sent in it (reno.py:30, `sent_time <= recovery start`): only at its instant.
        if ssthresh is None or cwnd < ssthresh:
            phase = PHASE_SLOW_START
        elif recovery is not None and t <= recovery:
            phase = PHASE_RECOVERY
        else:
            phase = PHASE_CONGESTION_AVOIDANCE
        if self.reno:
            epoch = w_max = k_us = None
        else:
            epoch = self._us(cc._t_epoch)
            w_max = float(cc._W_max)
            k_us = float(cc.K) * 1e6
        return (int(cwnd), None if ssthresh is None else int(ssthresh), int(cc.bytes_in_flight), phase,
                recovery, epoch, w_max, k_us)

    def close(self) -> None:
        self.sent.clear()
        self.pending = None
