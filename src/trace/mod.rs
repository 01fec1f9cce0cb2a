//! Traces as data: W3C trace context read from and written to headers (`context`),
//! the spans jetrelay records (`span`), and their OTLP protobuf encoding (`encode`).
//! Pure: no I/O, no clock, no outside crate; ids come from the caller's random
//! source, times from the caller. `crate::ops::traces` records and queues them,
//! `crate::http::collector` sends them.

pub mod context;
pub mod encode;
pub mod span;
