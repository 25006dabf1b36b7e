//! `[notify]`'s core: which ledger records page a person and which wait for the digest
//! (`route.rs`: routing, cooldown, quiet hours, flapping), and the outbox that makes delivery
//! survive restarts (`outbox.rs`). Pure apart from the outbox file; channels live at the edge.

pub mod daemon;
pub mod outbox;
pub mod route;
pub mod send;
