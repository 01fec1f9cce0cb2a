//! jetrelay: a sidecar that consumes NATS JetStream and delivers each message to a
//! local app over HTTP, mapping the app's answer to ack, delayed nak, term or
//! in-progress. See `ARCHITECTURE.md` for the code map and the layer table.
//!
//! The modules in layer order, from the ground up: a module imports only from the
//! layers below its own (`tests/tidy.rs` checks it).

// The pure core: decisions and data, no I/O, no clocks.
pub mod app;
pub mod capacity;
pub mod dead_letter;
pub mod digest;
pub mod duration;
pub mod message;
pub mod outputs;
pub mod pace;
pub mod policy;
pub mod printable;
pub mod route;
pub mod subject;
pub mod topology;
pub mod trace;

// The vocabulary the dispatcher and the boundaries share (the seams, the shutdown
// clock), and the files read at start-up (secrets, TLS).
pub mod seam;
pub mod secret;
pub mod tls;

// Operations: metrics (prometheus), readiness, logging; and admission: the app's
// health and reachability, and the pacing, shared by whatever runs requests at the app.
pub mod admission;
pub mod ops;

// The boundaries: NATS (async-nats), the app (reqwest), the servers jetrelay offers
// (axum). None imports another.
pub mod http;
pub mod nats;
pub mod serve;

// What runs over the boundaries: a consumer group's member and its administration,
// the dispatcher, and the runner of a service's NATS requests.
pub mod dispatch;
pub mod group;
pub mod service;

// One source's life: bind or join, run its dispatcher, bind again.
pub mod source;

// The wiring: the configuration tree, the daemon's supervisor (and the settings it
// hands each room), the command line.
pub mod cli;
pub mod config;
pub mod daemon;
