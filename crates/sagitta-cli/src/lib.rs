//! What the `sagitta` tools share: reading a dataset directory's `.npy`
//! matrices and texts ([`npy`], [`data`]) and building and timing indexes
//! over its rows ([`rows`]). The `sagitta` binary (`src/main.rs`: `demo`,
//! `build`) and the benchmark binary `sagitta-bench` use it; the store
//! and the server do not.

pub mod data;
pub mod npy;
pub mod rows;
