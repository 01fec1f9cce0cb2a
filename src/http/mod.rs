//! The app's side, the only module that names `reqwest` and `h2` types (and hyper's client): how every HTTP client
//! is built (`client`), the app's pooled client shared per origin (`app`), jetrelay's own HTTP/1.1 pool
//! for `http://` apps (`h1`) and h2c's connections (`h2`), both made by `dial`, an answer whichever client brought it (`answer`) or why there was none (`broke`), the request to the app and its answer (`forward`), the app's
//! credentials kept current (`credentials`), the Standard Webhooks signer (`signing`), the OAuth2 client credentials token (`oauth2`) and the app's health probe (`probe`), whether an h2c app speaks HTTP/2
//! (`h2c`), and another jetrelay's running config
//! read from its admin port (`running`). What
//! the requests carry and what the answers mean, as pure functions, is `crate::app`.

pub mod answer;
pub mod app;
pub mod broke;
pub mod client;
pub mod collector;
pub mod credentials;
pub mod dial;
pub mod forward;
pub mod h1;
pub mod h2;
pub mod h2c;
pub mod oauth2;
pub mod probe;
pub mod running;
pub mod signing;
