//! The app's side, the only module that names `reqwest` types: how every HTTP client
//! is built (`client`), the app's pooled client shared per origin (`app`), the request to the app and its answer (`forward`), the app's
//! credentials kept current (`credentials`) and the app's health probe (`probe`), whether an h2c app speaks HTTP/2
//! (`h2c`), and another jetrelay's running config
//! read from its admin port (`running`). What
//! the requests carry and what the answers mean, as pure functions, is `crate::app`.

pub mod app;
pub mod client;
pub mod collector;
pub mod credentials;
pub mod forward;
pub mod h2c;
pub mod probe;
pub mod running;
