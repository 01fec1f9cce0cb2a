//! The command-line tools besides the daemon: `jetrelay check` (the topology plan,
//! changing nothing) and `jetrelay group …` (consumer-group administration).

pub mod check;
pub mod group;
