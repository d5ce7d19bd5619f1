/*
 * The two real msquic findings, as C against msquic's own src/core/cubic.c (2.5.1), in the
 * style of msquic's src/core/unittest/CubicTest.cpp: the controller is driven through its
 * function table with hand-made QUIC_ACK_EVENT / QUIC_LOSS_EVENT / QUIC_ECN_EVENT values,
 * against implementations/msquic/shim/precomp.h.  Built and run by
 * tests/adapters/test_msquic.py (test_native_*).  Exit 0: the finding is present (the
 * release's behaviour); exit 1: it is not (a fixed cubic.c).  Argument: aimd | ecn-undo |
 * ecn-undo-divide.
 */
#include "precomp.h"
#include "cubic.c"

#include <stdio.h>
#include <stdlib.h>

uint64_t msq_now_us;
void msq_assert_failed(const char* e, const char* f, int l) { fprintf(stderr, "assert %s %s:%d\n", e, f, l); }

static QUIC_CONNECTION Connection;
#define CC (&Connection.CongestionControl)
#define Cubic (&Connection.CongestionControl.Cubic)

static void Initialize(uint32_t WindowPackets)
{
    QUIC_SETTINGS_INTERNAL Settings = {0};
    memset(&Connection, 0, sizeof(Connection));
    Settings.InitialWindowPackets = WindowPackets;
    Settings.SendIdleTimeoutMs = 1000;
    Connection.Settings = Settings;
    Connection.Paths[0].Route.RemoteAddress.Family = QUIC_ADDRESS_FAMILY_INET;
    Connection.Paths[0].Mtu = 1228;                 /* DatagramPayloadLength 1200 */
    Connection.Paths[0].SmoothedRtt = 100000;
    Connection.Paths[0].RttVariance = 10000;
    Connection.Paths[0].GotFirstRttSample = TRUE;
    CubicCongestionControlInitialize(CC, &Settings);
}

static QUIC_ACK_EVENT Ack(uint64_t TimeNow, uint64_t LargestAck, uint64_t LargestSent, uint32_t Bytes)
{
    QUIC_ACK_EVENT A = {0};
    A.TimeNow = TimeNow;
    A.LargestAck = LargestAck;
    A.LargestSentPacketNumber = LargestSent;
    A.NumRetransmittableBytes = Bytes;
    A.SmoothedRtt = 100000;
    A.MinRtt = 100000;
    A.MinRttValid = TRUE;
    return A;
}

/* cubic.c:630-638: one loss, recovery ends, then ACKs of one 1200-byte packet each.  An
 * 11-packet window (13200) leaves AimdWindow = 9240 after the loss; the half-slope
 * accumulator (600 a packet) first exceeds it at 9600, 360 over: 9600 - (9240 + 1200) < 0
 * wraps, and the next 600 does not bring it back over zero.  (With 10 packets, 8400, the
 * crossing is 600 over and the next ACK's 600 repairs the wrap: the sizes matter.) */
static int AimdWrap(void)
{
    Initialize(11);
    CC->QuicCongestionControlOnDataSent(CC, 13200);
    QUIC_LOSS_EVENT Loss = { .LargestPacketNumberLost = 1, .LargestSentPacketNumber = 10,
                             .NumRetransmittableBytes = 1200 };
    CC->QuicCongestionControlOnDataLost(CC, &Loss);               /* 13200 -> 9240 */
    uint64_t T = 1000000000;
    QUIC_ACK_EVENT A = Ack(T, 11, 11, 1200);                       /* ends recovery */
    CC->QuicCongestionControlOnDataAcknowledged(CC, &A);
    uint32_t Before = Cubic->AimdWindow;                           /* 9240 */
    int Wrapped = 0;
    for (int i = 0; i < 40; i++) {
        CC->QuicCongestionControlOnDataSent(CC, 1200);
        T += 10000;
        A = Ack(T, 12 + i, 12 + i, 1200);
        CC->QuicCongestionControlOnDataAcknowledged(CC, &A);
        if (Cubic->AimdAccumulator > 0x80000000u) Wrapped = 1;
    }
    printf("AimdWindow %u -> %u, AimdAccumulator %u, cwnd %u\n", Before, Cubic->AimdWindow,
           Cubic->AimdAccumulator, Cubic->CongestionWindow);
    /* RFC 3465 order: 40 x 600 bytes grow AimdWindow by at most 2 datagrams. */
    return Wrapped && Cubic->AimdWindow > Before + 5 * 1200 ? 0 : 1;
}

/* cubic.c:297-305, 775-799: an ECN congestion event, then a spurious-loss undo. */
static int EcnUndo(int Divide)
{
    Initialize(10);
    CC->QuicCongestionControlOnDataSent(CC, 12000);
    QUIC_ECN_EVENT Ecn = { .LargestPacketNumberAcked = 9, .LargestSentPacketNumber = 9 };
    CC->QuicCongestionControlOnEcn(CC, &Ecn);                      /* 12000 -> 8400 */
    QUIC_LOSS_EVENT Loss = { .LargestPacketNumberLost = 5, .LargestSentPacketNumber = 9,
                             .NumRetransmittableBytes = 2400 };
    CC->QuicCongestionControlOnDataLost(CC, &Loss);               /* inside that recovery */
    CC->QuicCongestionControlOnSpuriousCongestionEvent(CC);       /* the lost ones acked */
    printf("after undo: cwnd %u ssthresh %u\n", Cubic->CongestionWindow, Cubic->SlowStartThreshold);
    if (Cubic->CongestionWindow != 0) return 1;
    if (Divide) {
        QUIC_ACK_EVENT A = Ack(1000000000, 10, 11, 1200);
        fflush(stdout);
        CC->QuicCongestionControlOnDataAcknowledged(CC, &A);      /* / CongestionWindow */
        printf("survived the ACK: cwnd %u\n", Cubic->CongestionWindow);
        return 1;
    }
    return 0;
}

int main(int argc, char** argv)
{
    msq_now_us = 1000000000;
    if (argc == 2 && strcmp(argv[1], "aimd") == 0) return AimdWrap();
    if (argc == 2 && strcmp(argv[1], "ecn-undo") == 0) return EcnUndo(0);
    if (argc == 2 && strcmp(argv[1], "ecn-undo-divide") == 0) return EcnUndo(1);
    fprintf(stderr, "usage: %s aimd|ecn-undo|ecn-undo-divide\n", argv[0]);
    return 2;
}
