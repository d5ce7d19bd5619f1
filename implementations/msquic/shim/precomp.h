/*
 * The minimum of msquic that src/core/cubic.c needs, in place of its
 * src/core/precomp.h (which pulls in the whole connection, the platform layer
 * and TLS).  build.sh copies cubic.c, cubic.h, congestion_control.h, bbr.h,
 * sliding_window_extremum.h and quicdef.h out of the tree into one folder, so
 * that cubic.c's `#include "precomp.h"` (quotes: the including file's folder
 * first) does not find the real one beside it and falls through to this file
 * on the -I path.  Everything here is what cubic.c reads or calls, no more:
 *
 *   - SAL annotations and platform macros: no-ops / the POSIX definitions
 *     (src/inc/quic_platform.h, quic_platform_posix.h, quic_datapath.h),
 *     which build.sh cuts out verbatim into msq_platform_part.h;
 *   - QUIC_SETTINGS_INTERNAL, QUIC_PATH, QUIC_CONNECTION: only the fields
 *     cubic.c touches (`grep -o 'Connection->[A-Za-z.]*' cubic.c`);
 *   - the connection functions cubic.c calls for logging, flow-blocked
 *     bookkeeping and the send buffer: no-ops (they change no controller state).
 *
 * The controller state itself (QUIC_CONGESTION_CONTROL, its Cubic union
 * member) comes from upstream's own congestion_control.h / cubic.h, unmodified.
 */
#ifndef MSQ_SHIM_PRECOMP_H
#define MSQ_SHIM_PRECOMP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* SAL and kernel-mode annotations (src/inc/quic_platform_posix.h defines them empty). */
#define _IRQL_requires_max_(x)
#define _In_
#define _Inout_
#define _Out_
#define _In_opt_
#define PASSIVE_LEVEL 0
#define DISPATCH_LEVEL 2
#define QUIC_INLINE static inline
#define __fallthrough
#define UNREFERENCED_PARAMETER(p) (void)(p)

typedef uint8_t BOOLEAN;
#define TRUE 1
#define FALSE 0

#define CXPLAT_MAX(a, b) (((a) > (b)) ? (a) : (b))
#define CXPLAT_MIN(a, b) (((a) < (b)) ? (a) : (b))
#define CXPLAT_STATIC_ASSERT(X, Y) _Static_assert(X, Y)
#define IS_POWER_OF_TWO(x) (((x) != 0) && (((x) & ((x) - 1)) == 0))

/* Debug assertions (CXPLAT_DBG_ASSERT) are compiled out of a release msquic;
 * the adapter counts them instead, so a broken precondition (bytes in flight
 * going negative) is reported as an adapter error with its text, never
 * silently wrapped and never a crash of the run.  CXPLAT_FRE_ASSERT is kept
 * in release builds upstream: the same. */
void msq_assert_failed(const char* expr, const char* file, int line);
#define CXPLAT_DBG_ASSERT(exp) ((exp) ? (void)0 : msq_assert_failed(#exp, __FILE__, __LINE__))
#define CXPLAT_FRE_ASSERT(exp) CXPLAT_DBG_ASSERT(exp)

/* Tracing (CLOG / LTTng upstream): nothing. */
#define QuicTraceEvent(...) ((void)0)
#define QuicTraceLogConnVerbose(...) ((void)0)
#define QuicTraceLogConnWarning(...) ((void)0)
#define QuicTraceLogVerbose(...) ((void)0)

/* Time, address family and payload helpers: cut verbatim by build.sh out of
 * src/inc/quic_platform.h (US_TO_MS .. S_TO_MS, CXPLAT_CONTAINING_RECORD),
 * src/inc/quic_platform_posix.h (CxPlatTimeDiff64, CxPlatTimeAtOrBefore64)
 * and src/inc/quic_datapath.h (header sizes, MaxUdpPayloadSizeForFamily). */
typedef uint16_t QUIC_ADDRESS_FAMILY;
#define QUIC_ADDRESS_FAMILY_INET 2 /* AF_INET (src/inc/msquic_posix.h:159) */
#include "msq_platform_part.h"

/* The adapter's clock (stack microseconds of the event being applied);
 * cubic.c reads CxPlatTimeUs64() only to stamp Send.LastFlushTime. */
extern uint64_t msq_now_us;
static inline uint64_t CxPlatTimeUs64(void) { return msq_now_us; }

typedef struct QUIC_SENT_PACKET_METADATA QUIC_SENT_PACKET_METADATA;
typedef int QUIC_STATUS; /* sliding_window_extremum.h declares functions returning it; none is called */

/* src/core/settings.h: the fields CubicCongestionControlInitialize and the
 * controller read. */
typedef struct QUIC_SETTINGS_INTERNAL {
    uint32_t SendIdleTimeoutMs;
    uint32_t InitialWindowPackets;
    uint16_t CongestionControlAlgorithm;
    BOOLEAN HyStartEnabled;
    BOOLEAN PacingEnabled;
    BOOLEAN NetStatsEventEnabled;
} QUIC_SETTINGS_INTERNAL;

#include "quicdef.h"
#include "congestion_control.h"

typedef enum { RouteUnresolved, RouteResolving, RouteSuspected, RouteResolved } CXPLAT_ROUTE_STATE;

/* src/core/path.h: Route.RemoteAddress's family and Mtu give the datagram
 * payload size (QuicPathGetDatagramPayloadSize, path.h:259-266, copied below);
 * the RTT fields are the connection's RFC 9002 estimator. */
typedef struct QUIC_PATH {
    struct {
        struct { QUIC_ADDRESS_FAMILY Family; } RemoteAddress;
        CXPLAT_ROUTE_STATE State;
    } Route;
    uint16_t Mtu;
    BOOLEAN GotFirstRttSample;
    uint64_t SmoothedRtt;   /* microseconds */
    uint64_t RttVariance;   /* microseconds */
    uint64_t OneWayDelay;
} QUIC_PATH;

static inline QUIC_ADDRESS_FAMILY QuicAddrGetFamily(const void* Addr)
{
    return *(const QUIC_ADDRESS_FAMILY*)Addr; /* msquic_posix.h:280-285: Addr->Ip.sa_family */
}

static inline uint16_t QuicPathGetDatagramPayloadSize(const QUIC_PATH* Path)
{
    /* path.h:259-266, verbatim. */
    return
        MaxUdpPayloadSizeForFamily(
            QuicAddrGetFamily(&Path->Route.RemoteAddress), Path->Mtu);
}

typedef struct QUIC_CONNECTION {
    QUIC_SETTINGS_INTERNAL Settings;
    QUIC_PATH Paths[1];
    struct {
        uint64_t NextPacketNumber;
        uint64_t LastFlushTime;
        uint64_t PeerMaxData;
        uint64_t OrderedStreamBytesSent;
    } Send;
    struct { uint64_t PostedBytes; uint64_t IdealBytes; } SendBuffer;
    struct {
        struct {
            uint64_t TotalBytes;
            uint32_t CongestionCount;
            uint32_t PersistentCongestionCount;
            uint32_t EcnCongestionCount;
        } Send;
    } Stats;
    QUIC_CONGESTION_CONTROL CongestionControl;
} QUIC_CONNECTION;

/* src/core/congestion_control.h (upstream defines it with the connection). */
static inline QUIC_CONNECTION* QuicCongestionControlGetConnection(const QUIC_CONGESTION_CONTROL* Cc)
{
    return CXPLAT_CONTAINING_RECORD(Cc, QUIC_CONNECTION, CongestionControl);
}

/* Only reached with Settings.NetStatsEventEnabled, which stays FALSE
 * (QUIC_DEFAULT_NET_STATS_EVENT_ENABLED, quicdef.h). */
#define QUIC_CONNECTION_EVENT_NETWORK_STATISTICS 14
typedef struct QUIC_CONNECTION_EVENT {
    int Type;
    struct {
        uint32_t BytesInFlight;
        uint64_t PostedBytes;
        uint64_t IdealBytes;
        uint64_t SmoothedRTT;
        uint32_t CongestionWindow;
        uint64_t Bandwidth;
    } NETWORK_STATISTICS;
} QUIC_CONNECTION_EVENT;

#define QUIC_FLOW_BLOCKED_CONGESTION_CONTROL 0x02
static inline void QuicConnLogOutFlowStats(const QUIC_CONNECTION* c) { (void)c; }
static inline void QuicSendBufferConnectionAdjust(QUIC_CONNECTION* c) { (void)c; }
static inline BOOLEAN QuicConnAddOutFlowBlockedReason(QUIC_CONNECTION* c, int r) { (void)c; (void)r; return TRUE; }
static inline BOOLEAN QuicConnRemoveOutFlowBlockedReason(QUIC_CONNECTION* c, int r) { (void)c; (void)r; return TRUE; }
static inline int QuicConnIndicateEvent(QUIC_CONNECTION* c, QUIC_CONNECTION_EVENT* e) { (void)c; (void)e; return 0; }

#endif
