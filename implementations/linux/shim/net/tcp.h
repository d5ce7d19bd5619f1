/* ccdiff shim for include/net/tcp.h: the types and fields in kshim.h, then
 * the inline helpers copied verbatim from the fetched tree's tcp.h by
 * build.sh (gen/tcp_h_part.h). */
#ifndef CCDIFF_LINUX_NET_TCP_H
#define CCDIFF_LINUX_NET_TCP_H
#include "../kshim.h"
#include "tcp_h_part.h"
#endif
