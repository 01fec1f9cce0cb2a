//! The app's side, the only module that names `reqwest` types: how every HTTP client
//! is built (`client`), the request to the app and its answer (`forward`), the app's
//! credentials kept current (`credentials`), the header contract as a pure function
//! (`headers`), the batch document (`batch`) and the app's health probe (`probe`).

pub mod batch;
pub mod client;
pub mod credentials;
pub mod forward;
pub mod headers;
pub mod probe;
