/* ccdiff shim: everything tcp_cubic.c needs of the kernel headers is in kshim.h. */
#include "../kshim.h"
