//! The VIPs' BGP announcement (M35): decided from the child rules'
//! exported states, the node's drain and shutdown; each change is logged
//! and given to the shell as [`Output::Announce`].

use super::{Core, Output, say};

impl Core {
    /// Decides the VIPs' announcement (M35) from the child rules' exported
    /// states; a change is logged (once per VIP) and output as
    /// [`Output::Announce`]. Without `[bgp]` nothing is announced (and
    /// what was, after a reload dropped `[bgp]`, is withdrawn).
    pub(super) fn announce(&mut self) {
        use crate::announce::{NodeState, Policy, desired};
        let next = match Policy::of(&self.compiled) {
            Some(policy) => {
                let health = self.balance.child_states(&self.compiled);
                let node = NodeState {
                    drained: self.node_drained(),
                    shutting_down: self.shutting_down(),
                };
                desired(&self.compiled, &health, node, policy)
            }
            None if self.announcements.current().is_none() => return,
            None => Vec::new(),
        };
        if let Some(lines) = self.announcements.update(next.clone()) {
            for l in lines {
                say!(self.out, Info, "bgp: {l}");
            }
            let routes = crate::announce::routes(&self.compiled, &next);
            self.out.push(Output::Announce(next, routes));
        }
    }

    /// VIPs announced and withdrawn since start (M35).
    pub fn announcement_counts(&self) -> (u64, u64) {
        (
            self.announcements.announced_total,
            self.announcements.withdrawn_total,
        )
    }

    /// The announcement decision in force (`None`: no `[bgp]`).
    pub fn announcement(&self) -> Option<&crate::announce::Desired> {
        self.announcements.current()
    }
}
