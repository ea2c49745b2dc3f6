//! One module per verb family. Each defines its arguments (clap `Args`, whose doc comments are
//! the `--help` text) and a `run` that returns an [`Outcome`](crate::failure::Outcome).

pub mod bench;
pub mod data;
pub mod filefrag;
pub mod fsck;
pub mod get;
pub mod inspect;
pub mod mkfs;
pub mod put;
pub mod run;
pub mod snapshot;
