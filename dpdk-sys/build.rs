//! Generates bindings to the system DPDK and compiles C wrappers for its
//! `static inline` hot-path functions.
//!
//! Everything about the local DPDK comes from `pkg-config libdpdk`: include
//! paths, `-include rte_config.h`, the `-march` DPDK was built for, and the
//! link libraries. Nothing here is hard-coded to one DPDK release or CPU.

// A build script reports failure by panicking, with the message cargo shows.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::env;
use std::path::PathBuf;
use std::process::Command;

const MIN_DPDK: &str = "22.11";

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_DPDK)
        .cargo_metadata(true)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "\nerror: DPDK >= {MIN_DPDK} was not found through `pkg-config libdpdk`.\n\
                 On Debian/Ubuntu install it with:\n\
                 \n    apt-get install libdpdk-dev dpdk-dev pkg-config\n\
                 \n(or run scripts/setup.sh, which installs everything the build needs).\n\
                 pkg-config said: {e}\n"
            );
            std::process::exit(1);
        }
    };
    // rte_vdev_init lives in the vdev bus driver, which pkg-config's Libs do not
    // list (drivers are plugins in the shared build). Link its library directly.
    println!("cargo:rustc-link-lib=rte_bus_vdev");
    println!("cargo:version={}", lib.version);

    let cflags = dpdk_cflags();
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wrappers = out.join("static_fns");

    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(&cflags)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .default_enum_style(bindgen::EnumVariation::ModuleConsts)
        .derive_default(true)
        .derive_debug(false)
        .use_core()
        .layout_tests(true)
        .generate_comments(false)
        // Types whose packed-with-aligned-member layout Rust cannot express;
        // we never touch them (packets are parsed as bytes by `wire`).
        .opaque_type("rte_arp_hdr")
        .opaque_type("rte_arp_ipv4")
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .allowlist_function(FUNCTIONS.join("|"))
        .allowlist_type(TYPES.join("|"))
        .allowlist_var(VARS.join("|"))
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on DPDK headers: {e}"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    let mut build = cc::Build::new();
    build
        .file(wrappers.with_extension("c"))
        .file("shim.c")
        .include(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .opt_level(3)
        .warnings(false);
    for flag in &cflags {
        build.flag(flag);
    }
    build.compile("dpdk_sys_shim");
}

/// Every token of `pkg-config --cflags libdpdk`, in order. The flags must reach
/// both clang (bindgen) and the C compiler unchanged: without DPDK's own
/// `-march`, rte_memcpy.h does not compile.
fn dpdk_cflags() -> Vec<String> {
    let output = Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("run pkg-config --cflags libdpdk");
    assert!(
        output.status.success(),
        "pkg-config --cflags libdpdk failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("pkg-config output is UTF-8")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

const FUNCTIONS: &[&str] = &[
    // EAL, lcores, time
    "rte_eal_init",
    "rte_eal_cleanup",
    "rte_strerror",
    "rte_lcore_id",
    "rte_lcore_count",
    "rte_get_main_lcore",
    "rte_socket_id",
    "rte_thread_register",
    "rte_thread_unregister",
    "rte_lcore_is_enabled",
    "rte_eal_remote_launch",
    "rte_eal_wait_lcore",
    "rte_get_tsc_hz",
    "rte_rdtsc",
    "rte_get_tsc_cycles",
    "rte_delay_us_block",
    "rte_version",
    "spw_rte_errno",
    // mempool
    "rte_pktmbuf_pool_create",
    "rte_mempool_free",
    "rte_mempool_avail_count",
    "rte_mempool_in_use_count",
    // hugepage heap (the flow table's memory)
    "rte_eal_has_hugepages",
    "rte_malloc_socket",
    "rte_free",
    // mbuf (mostly static inline)
    "rte_pktmbuf_alloc",
    "rte_pktmbuf_alloc_bulk",
    "rte_pktmbuf_free",
    "rte_pktmbuf_free_bulk",
    "rte_pktmbuf_append",
    "rte_pktmbuf_prepend",
    "rte_pktmbuf_adj",
    "rte_pktmbuf_trim",
    "rte_pktmbuf_headroom",
    "rte_pktmbuf_tailroom",
    "rte_pktmbuf_reset",
    "rte_pktmbuf_clone",
    "rte_mbuf_refcnt_read",
    // ethdev
    "rte_eth_dev_count_avail",
    "rte_eth_dev_is_valid_port",
    "rte_eth_find_next_owned_by",
    "rte_eth_dev_get_port_by_name",
    "rte_eth_dev_get_name_by_port",
    "rte_eth_dev_info_get",
    "rte_eth_dev_configure",
    "rte_eth_dev_adjust_nb_rx_tx_desc",
    "rte_eth_rx_queue_setup",
    "rte_eth_tx_queue_setup",
    "rte_eth_dev_start",
    "rte_eth_dev_stop",
    "rte_eth_dev_close",
    "rte_eth_dev_socket_id",
    "rte_eth_macaddr_get",
    "rte_eth_dev_default_mac_addr_set",
    "rte_eth_link_get_nowait",
    "rte_eth_promiscuous_enable",
    "rte_eth_dev_set_mtu",
    "rte_eth_dev_get_mtu",
    "rte_eth_stats_get",
    "rte_eth_stats_reset",
    "rte_eth_xstats_get",
    "rte_eth_xstats_get_names",
    "rte_eth_rx_burst",
    "rte_eth_tx_burst",
    // the interrupt thread (crates/dpdk/src/gate.rs takes turns with it)
    "rte_intr_instance_alloc",
    "rte_intr_fd_set",
    "rte_intr_type_set",
    "rte_intr_callback_register",
    // virtual devices
    "rte_vdev_init",
    "rte_vdev_uninit",
    // DPDK's capture tools (dpdk-dumpcap, dpdk-pdump) attach through these
    "rte_pdump_init",
    "rte_pdump_uninit",
    "rte_eal_process_type",
    // telemetry commands of our own beside DPDK's (dpdk-telemetry.py)
    "rte_telemetry_register_cmd",
    "rte_tel_data_start_dict",
    "rte_tel_data_start_array",
    "rte_tel_data_string",
    "rte_tel_data_add_dict_string",
    "rte_tel_data_add_dict_int",
    "rte_tel_data_add_dict_u64",
    "rte_tel_data_add_dict_container",
    "rte_tel_data_add_array_string",
    "rte_tel_data_add_array_int",
    "rte_tel_data_add_array_u64",
    "rte_tel_data_add_array_container",
    "rte_tel_data_alloc",
    "rte_tel_data_free",
];

const TYPES: &[&str] = &[
    "rte_mbuf",
    "rte_mempool",
    "rte_eth_conf",
    "rte_eth_dev_info",
    "rte_eth_rxconf",
    "rte_eth_txconf",
    "rte_eth_stats",
    "rte_eth_xstat",
    "rte_eth_xstat_name",
    "rte_eth_link",
    "rte_ether_addr",
    "rte_eth_rx_mq_mode",
    "rte_eth_tx_mq_mode",
    "rte_intr_handle_type",
    "rte_proc_type_t",
    "rte_tel_data",
    "rte_tel_value_type",
];

const VARS: &[&str] = &[
    "RTE_TEL_MAX_STRING_LEN",
    "RTE_TEL_MAX_DICT_ENTRIES",
    "RTE_TEL_MAX_ARRAY_ENTRIES",
    "RTE_PKTMBUF_HEADROOM",
    "RTE_MBUF_DEFAULT_BUF_SIZE",
    "RTE_MAX_ETHPORTS",
    "RTE_MAX_LCORE",
    "RTE_ETH_DEV_NO_OWNER",
    "RTE_ETH_LINK_.*",
    "RTE_ETH_XSTATS_NAME_SIZE",
    "RTE_ETHER_ADDR_LEN",
    "SOCKET_ID_ANY",
    "LCORE_ID_ANY",
    "SPW_.*",
];
