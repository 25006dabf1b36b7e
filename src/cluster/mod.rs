//! Many nodes, one run: each node's watch knows its place in the job ([`identity`]), writes
//! its node record to a store every node sees ([`store`]) at its sampling interval, reads the
//! others', and names a node unheard for the stale limit ([`health`]): "node 3 has not
//! reported since 03:12:40Z (last step 1200, working): machine lost or roger stopped"; and a
//! stall from every node's ranks' stacks ([`hang`]): "node 1's rank 2 in `slow_loader`". The
//! decisions are pure over the records read; the store sits behind one small trait.

pub mod bucket;
pub mod commit;
pub mod hang;
pub mod health;
pub mod identity;
pub mod parts;
pub mod store;
pub mod verdict;
pub mod view;

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

/// One store call's limit in the watch (a healthy bucket answers a small object in well under
/// a second; past this the store is down for this sample).
pub const CALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);
const STATUS_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The job's store from `[cluster] store` (`None` without one), `{job}` filled in: a bucket
/// prefix (`s3://…`, reached as `[remote]` says) or a directory. `existing`: for a reader
/// (`roger status`), which makes nothing.
pub fn open_store(
    cfg: &crate::config::Config,
    existing: bool,
) -> anyhow::Result<Option<Box<dyn Store>>> {
    let Some(root) = &cfg.cluster.store else {
        return Ok(None);
    };
    let root = identity::store_path(root, &|k| std::env::var(k).ok())?;
    let text = root.to_string_lossy();
    let inner: Box<dyn Store + Send + Sync> = if text.starts_with("s3://") {
        Box::new(bucket::BucketStore::open(&text, &cfg.remote)?)
    } else if existing {
        Box::new(DirStore::existing(&root))
    } else {
        Box::new(DirStore::open(&root)?)
    };
    // The watch samples on while the store hangs; `status` waits a little longer.
    let limit = if existing { STATUS_LIMIT } else { CALL_LIMIT };
    Ok(Some(Box::new(store::Bounded::new(inner, limit))))
}
