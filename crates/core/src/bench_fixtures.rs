//! Synthetic clusters for benchmarks (and the simulator's stress scenarios).
