//! Flow-state sync with the peers (M36): the workers' new entries batched
//! into datagrams, datagrams received (entries, dump requests, the peers'
//! measured rates, M25), and the goodbye at exit. Nothing without
//! `[flow_sync]`.

use std::time::Duration;

use flowtable::FlowTable;

use super::{Core, Output, say};

impl Core {
    /// Hands flow-sync datagrams to the shell ([`Output::SyncSend`]).
    pub(super) fn send(&mut self, datagrams: Vec<crate::sync::Datagram>) {
        for (to, datagram) in datagrams {
            self.out.push(Output::SyncSend { to, datagram });
        }
    }

    /// Periodic flow-sync work of [`Core::step`] at `now` (M36): the workers' new
    /// entries from `queue` are batched into [`Output::SyncSend`]s, and
    /// dumps asked for continue. Nothing without `[flow_sync]`.
    pub(super) fn flow_sync(
        &mut self,
        now: Duration,
        queue: &dataplane::sync::SyncQueue,
        flows: &FlowTable,
    ) {
        self.advance(now);
        let tick = self.tick_now().get();
        let Some(s) = &mut self.sync else { return };
        let mut sends = Vec::new();
        s.poll(self.now, tick, queue, flows, &mut sends);
        self.send(sends);
    }

    /// Input: a flow-sync datagram received from `from` (M36). Only a
    /// configured peer's, authentic, in its session and never seen before
    /// (M54), is taken: its entries go into `flows` where their key is
    /// absent, a dump request starts a paced dump, its measured rates count
    /// at the next planning (M25); a hello is answered.
    pub fn sync_received(
        &mut self,
        now: Duration,
        from: std::net::SocketAddr,
        datagram: &[u8],
        flows: &FlowTable,
    ) {
        self.advance(now);
        let tick = self.tick_now().get();
        let Some(s) = &mut self.sync else { return };
        let mut sends = Vec::new();
        let news = s.received(
            self.now,
            from,
            datagram,
            &self.live,
            &self.builder,
            flows,
            tick,
            &mut sends,
        );
        self.send(sends);
        match news {
            Some(crate::sync::PeerNews::Rates(rates)) => {
                self.balance.peer_rates(from, self.now, &rates);
            }
            Some(crate::sync::PeerNews::Leaving) => {
                self.balance.peer_left(from);
                say!(
                    self.out,
                    Info,
                    "cluster: peer {from} is leaving; its share of capacity is released"
                );
            }
            None => {}
        }
    }

    /// The node is about to exit (graceful or not): tells the flow-sync
    /// peers, so they stop holding its share of capacity (M25).
    pub fn leave(&mut self, now: Duration) {
        self.advance(now);
        if let Some(s) = &mut self.sync {
            let mut sends = Vec::new();
            s.leave(&mut sends);
            self.send(sends);
        }
    }

    /// The cluster as counted for `RATE` capacity now (M25 with M34).
    pub fn cluster(&self) -> crate::report::Cluster {
        self.balance.cluster(self.now)
    }

    /// The flow-sync counters, with `[flow_sync]`.
    pub fn sync_counters(&self) -> Option<crate::sync::SyncCounters> {
        self.sync.as_ref().map(crate::sync::SyncState::counters)
    }
}
