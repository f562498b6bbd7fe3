/* Hand-written shims for what bindgen cannot wrap: rte_errno is a per-lcore
 * __thread variable behind a macro. Everything static inline is wrapped by
 * bindgen's generated static_fns.c instead. */
#include "wrapper.h"

int spw_rte_errno(void) { return rte_errno; }
