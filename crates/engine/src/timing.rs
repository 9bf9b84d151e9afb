//! Wall-clock timing that works natively and in the browser (`std::time::Instant` panics on wasm32).

/// Milliseconds since it started.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(web_time::Instant);

impl Stopwatch {
    pub fn start() -> Self {
        Self(web_time::Instant::now())
    }

    pub fn elapsed_ms(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1000.0
    }
}
