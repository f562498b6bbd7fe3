/* The DPDK API surface Spillway binds. Keep it to what the safe layer uses. */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_mempool.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_bus_vdev.h>
#include <rte_interrupts.h>
#include <rte_version.h>
#include <rte_pdump.h>
#include <rte_telemetry.h>

/* Macros and thread-locals bindgen cannot express; defined in shim.c. */
int spw_rte_errno(void);

/* Function-like macros (RTE_BIT64) that bindgen cannot evaluate, restated as
 * constants so they reach Rust with DPDK's own values. */
static const uint64_t SPW_ETH_RSS_IP = RTE_ETH_RSS_IP;
static const uint64_t SPW_ETH_RSS_TCP = RTE_ETH_RSS_TCP;
static const uint64_t SPW_ETH_RSS_UDP = RTE_ETH_RSS_UDP;
static const uint64_t SPW_ETH_TX_OFFLOAD_IPV4_CKSUM = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
static const uint64_t SPW_ETH_TX_OFFLOAD_UDP_CKSUM = RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
static const uint64_t SPW_ETH_TX_OFFLOAD_TCP_CKSUM = RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
static const uint64_t SPW_ETH_TX_OFFLOAD_MBUF_FAST_FREE = RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
static const uint64_t SPW_ETH_RX_OFFLOAD_CHECKSUM = RTE_ETH_RX_OFFLOAD_CHECKSUM;
/* rte_intr_instance_alloc flag: memory of this process only (not hugepages). */
static const uint32_t SPW_INTR_INSTANCE_F_PRIVATE = RTE_INTR_INSTANCE_F_PRIVATE;
static const uint64_t SPW_ETH_RX_OFFLOAD_IPV4_CKSUM = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
static const uint64_t SPW_MBUF_F_RX_IP_CKSUM_MASK = RTE_MBUF_F_RX_IP_CKSUM_MASK;
static const uint64_t SPW_MBUF_F_RX_IP_CKSUM_BAD = RTE_MBUF_F_RX_IP_CKSUM_BAD;
static const uint64_t SPW_MBUF_F_RX_IP_CKSUM_GOOD = RTE_MBUF_F_RX_IP_CKSUM_GOOD;
static const uint64_t SPW_MBUF_F_RX_IP_CKSUM_NONE = RTE_MBUF_F_RX_IP_CKSUM_NONE;
