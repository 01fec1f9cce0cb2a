//! jetrelay: a sidecar that consumes NATS JetStream and delivers each message to a
//! local app over HTTP, mapping the app's answer to ack, delayed nak, term or
//! in-progress. See `ARCHITECTURE.md` for the code map.
//!
//! The modules in reading order: the pure core first (no I/O, table and property
//! tests at the bottom of each), then the boundaries to the outside crates, then the
//! wiring.

// The pure core: decisions and data, no I/O.
pub mod capacity;
pub mod dead_letter;
pub mod delivery;
pub mod outputs;
pub mod policy;
pub mod printable;
pub mod redrive;
pub mod secret;
pub mod subject;
pub mod topology;

// Configuration: the tree, its layering and its rules.
pub mod config;

// The boundaries: NATS (async-nats), the app (reqwest), operations (prometheus), the
// servers jetrelay offers (axum).
pub mod http;
pub mod nats;
pub mod ops;
pub mod serve;
pub mod tls;

// Consumer groups: the wire contract (pure) and a member's protocol.
pub mod group;

// The wiring: the dispatcher, the daemon's supervisor, the command line.
pub mod cli;
pub mod daemon;
pub mod dispatch;
