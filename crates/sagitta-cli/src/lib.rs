//! What the `sagitta` tools share: reading the `.npy` matrices of a
//! dataset directory ([`npy`]). The `sagitta` binary (`src/main.rs`) and
//! the benchmarks use it; the store and the server do not.

pub mod npy;
