//! Many nodes, one run: each node's watch knows its place in the job ([`identity`]), writes
//! its node record to a store every node sees ([`store`]) at its sampling interval, reads the
//! others', and names a node unheard for the stale limit ([`health`]): "node 3 has not
//! reported since 03:12:40Z (last step 1200, working): machine lost or roger stopped"; and a
//! stall from every node's ranks' stacks ([`hang`]): "node 1's rank 2 in `slow_loader`". The
//! decisions are pure over the records read; the store sits behind one small trait.

pub mod hang;
pub mod health;
pub mod identity;
pub mod parts;
pub mod store;
pub mod verdict;

pub use hang::{NodeStacks, RankStack};
pub use health::{Change, NodeRecord, Own, Peers};
pub use identity::Identity;
pub use store::{DirStore, Store};
pub use verdict::JobVerdict;

/// The key of node `n`'s record.
pub fn node_key(n: u32) -> String {
    format!("nodes/node-{n}.json")
}

/// Every node's newest record as the store holds it (`None`: not written yet), or the error
/// that made the store unreadable. A record that does not parse is an error naming its key.
pub fn read_all(store: &dyn Store, nodes: u32) -> anyhow::Result<Vec<(u32, Option<NodeRecord>)>> {
    (0..nodes)
        .map(|n| {
            let key = node_key(n);
            let rec = match store.get(&key)? {
                None => None,
                Some(b) => Some(serde_json::from_slice(&b).map_err(|e| {
                    anyhow::anyhow!("[cluster] store {}: {key}: {e}", store.describe())
                })?),
            };
            Ok((n, rec))
        })
        .collect()
}
