//! Time measured for the caller: the core never reads the clock, so whoever runs the loop hands
//! it a [`Stopwatch`] (the simulator's and the live binary's read the wall clock).

/// Measures elapsed time for the caller; the core has no clock of its own.
pub trait Stopwatch {
    /// Milliseconds since an origin fixed by the implementation.
    fn elapsed_millis(&self) -> f64;
}

/// A stopwatch that never advances, for callers that do not measure.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStopwatch;

impl Stopwatch for NoStopwatch {
    fn elapsed_millis(&self) -> f64 {
        0.0
    }
}
