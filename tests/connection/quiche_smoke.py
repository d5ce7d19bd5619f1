#!/usr/bin/env python3
"""Smoke test of quiche's connection shim, without ccdiff's driver.

    quiche_smoke.py LIB [--bytes N] [--delay-us D] [--seed S] [--options ...]

A client and a server of libccdiff_connection.so, datagrams carried directly
with a fixed one-way delay in virtual time (no loss, no bottleneck); the client
sends N bytes on its stream, the run ends when the server has read them and
the stream's end.  Prints the completion time, the final cwnd and a digest of
every datagram's (time, direction, size), so two runs can be compared.
"""
import argparse
import ctypes
import hashlib
import heapq
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIELDS = ("cwnd", "bytes_in_flight", "ssthresh", "smoothed_rtt_us", "min_rtt_us", "latest_rtt_us",
          "packets_sent", "packets_lost", "bytes_sent", "congestion_events", "in_recovery",
          "stream_bytes_read", "stream_fin_read", "established", "closed")
U64MAX = 2**64 - 1


class Stats(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in FIELDS]


def load(path):
    lib = ctypes.CDLL(path)
    u64, i64, vp = ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p
    for name, res, args in [
        ("ccd_conn_abi_version", ctypes.c_uint32, []),
        ("ccd_conn_new", vp, [ctypes.c_int, u64, u64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
        ("ccd_conn_free", None, [vp]),
        ("ccd_conn_recv", ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_size_t, u64]),
        ("ccd_conn_send", i64, [vp, vp, ctypes.c_size_t, u64, ctypes.POINTER(u64)]),
        ("ccd_conn_timeout", u64, [vp, u64]),
        ("ccd_conn_on_timeout", ctypes.c_int, [vp, u64]),
        ("ccd_conn_write", i64, [vp, u64, ctypes.c_int, u64]),
        ("ccd_conn_read", i64, [vp, u64]),
        ("ccd_conn_stats", ctypes.c_int, [vp, ctypes.POINTER(Stats)]),
        ("ccd_conn_last_error", ctypes.c_char_p, [vp]),
    ]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    assert lib.ccd_conn_abi_version() == 1
    return lib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--bytes", type=int, default=1_000_000)
    ap.add_argument("--delay-us", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--options", default="mds=1350")
    ap.add_argument("--limit-us", type=int, default=60_000_000)
    a = ap.parse_args()
    lib = load(a.lib)
    inc = ROOT / "implementations/include/connection"
    err = ctypes.create_string_buffer(512)
    opts = f"{a.options};cert={inc / 'cert.pem'};key={inc / 'key.pem'}"
    eps = []
    for is_server in (0, 1):
        h = lib.ccd_conn_new(is_server, 0, a.seed, opts.encode(), err, len(err))
        if not h:
            sys.exit(f"ccd_conn_new({is_server}): {err.value.decode()}")
        eps.append(h)
    client, server = eps

    def check(r, h, what):
        if r < 0:
            sys.exit(f"{what}: {lib.ccd_conn_last_error(h).decode()}")
        return r

    buf = ctypes.create_string_buffer(65536)
    at = ctypes.c_uint64()
    st = Stats()
    queue, seq = [], 0
    digest = hashlib.sha256()
    accepted = 0
    datagrams = [0, 0]
    max_cwnd = 0

    def stats(h):
        check(lib.ccd_conn_stats(h, ctypes.byref(st)), h, "stats")
        return {f: (None if getattr(st, f) == U64MAX else getattr(st, f)) for f in FIELDS}

    def settle(now):
        nonlocal accepted, seq, max_cwnd
        if accepted < a.bytes:
            accepted += check(lib.ccd_conn_write(client, a.bytes - accepted, 1, now), client, "write")
        check(lib.ccd_conn_read(server, now), server, "read")
        for who, h in enumerate(eps):
            last = now
            while True:
                n = check(lib.ccd_conn_send(h, buf, len(buf), now, ctypes.byref(at)), h, "send")
                if n == 0:
                    break
                release = max(now, at.value, last)
                last = release
                datagrams[who] += 1
                digest.update(f"{release} {who} {n}\n".encode())
                heapq.heappush(queue, (release + a.delay_us, seq, 1 - who, buf.raw[:n]))
                seq += 1
        max_cwnd = max(max_cwnd, stats(client)["cwnd"] or 0)

    now = 0
    settle(now)
    while now < a.limit_us:
        s = stats(server)
        if s["stream_bytes_read"] >= a.bytes and s["stream_fin_read"]:
            break
        timers = [lib.ccd_conn_timeout(h, now) for h in eps]
        nxt = min([queue[0][0]] if queue else [] + [t for t in timers if t != U64MAX] or [U64MAX])
        nxt = min([nxt] + [t for t in timers if t != U64MAX])
        if nxt == U64MAX:
            sys.exit(f"t={now}: nothing left to happen (no datagram, no timer)")
        now = max(now, nxt)
        while queue and queue[0][0] <= now:
            _, _, to, data = heapq.heappop(queue)
            check(lib.ccd_conn_recv(eps[to], data, len(data), now), eps[to], "recv")
        for h, t in zip(eps, timers):
            if t != U64MAX and t <= now:
                check(lib.ccd_conn_on_timeout(h, now), h, "on_timeout")
        settle(now)
    c, s = stats(client), stats(server)
    done = s["stream_bytes_read"] >= a.bytes and s["stream_fin_read"]
    print(f"options: {a.options}; seed {a.seed}; {a.bytes} bytes; one-way delay {a.delay_us} us")
    print(f"completed: {'yes' if done else 'NO'} at t={now} us")
    print(f"client: final cwnd {c['cwnd']}, max cwnd {max_cwnd}, srtt {c['smoothed_rtt_us']} us, "
          f"min rtt {c['min_rtt_us']} us, sent {c['packets_sent']} packets / {c['bytes_sent']} bytes, "
          f"lost {c['packets_lost']}, established {c['established']}")
    print(f"server: read {s['stream_bytes_read']} bytes, fin {s['stream_fin_read']}")
    print(f"datagrams: client {datagrams[0]}, server {datagrams[1]}; timeline sha256 {digest.hexdigest()[:16]}")
    for h in eps:
        lib.ccd_conn_free(h)


if __name__ == "__main__":
    main()
