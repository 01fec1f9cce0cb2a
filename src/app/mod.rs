//! The app's side of the contract, as pure functions: what a request to the app
//! carries (`headers`: which message headers pass, the metadata jetrelay adds, the
//! CloudEvents binding; `cloudevent`: structured mode, both ways) and the batch
//! document and its per-message answer (`batch`), an answer kept whole for a caller
//! that hands it on (`answer`), the Standard Webhooks signature a request carries
//! (`signing`), and which HTTP the app speaks (`transport`).
//! `crate::http` sends them; `crate::policy` decides what an answer means.

pub mod answer;
pub mod batch;
pub mod cloudevent;
pub mod headers;
pub mod signing;
pub mod transport;
