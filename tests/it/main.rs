//! Integration tests: one binary, real nats-server processes, a real HTTP app.

#![allow(unreachable_pub)] // A test binary: `pub` only shares the harness between its modules.
#![allow(clippy::unwrap_used, clippy::expect_used)] // In the harness, a panic is the failure report.

mod answers;
mod atomic;
mod autojoin;
mod batches;
mod binary;
mod cli;
mod control;
mod deploy;
mod direct;
mod dlq;
mod docs;
mod drain;
mod endpoint;
mod examples;
mod fast;
mod faults;
mod forwarding;
mod groups;
mod identity;
mod interop;
mod nothing_lost;
mod once;
mod operating;
mod outages;
mod outputs;
mod pacing;
mod pull;
mod scaler;
mod semantics;
mod service;
mod shutdown;
mod sources;
mod support;
mod tls;
mod topology;
mod traces;
mod transports;
