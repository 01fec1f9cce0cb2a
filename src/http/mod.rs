//! The app's side: the request to the app and its answer (`forward`, the only module
//! that names `reqwest` types), the header contract as a pure function (`headers`),
//! and the app's health probe (`probe`).

pub mod batch;
pub mod forward;
pub mod headers;
pub mod probe;
