//! Client-side rate limiting of API requests: a token bucket, so that a burst of node lookups
//! (one loop can resolve many new nodes) stays within what the API accepts instead of running
//! into its own throttling.
//!
//! Time is Tokio's clock, so tests can pause and advance it.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Requests per second allowed on average, and how many may go at once after a quiet period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Refill rate; zero or negative turns limiting off.
    pub per_second: f64,
    /// Bucket size, at least 1.
    pub burst: u32,
}

impl Default for RateLimit {
    /// 50 requests/s with bursts of 100. A loop reads every member of every plain pool (one
    /// request per node, as upstream), so a cluster of a few hundred nodes fits in a 10 s loop;
    /// what the limit stops is a runaway, e.g. hundreds of new nodes looked up at once.
    fn default() -> Self {
        RateLimit {
            per_second: 50.0,
            burst: 100,
        }
    }
}

#[derive(Debug)]
struct Bucket {
    /// May go negative: each waiter reserves its token at once, so waiters are served in order.
    tokens: f64,
    refilled_at: Instant,
}

/// A token bucket shared by every request of one client.
#[derive(Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    bucket: Mutex<Bucket>,
}

impl TokenBucket {
    pub fn new(limit: RateLimit) -> TokenBucket {
        TokenBucket {
            limit,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(limit.burst.max(1)),
                refilled_at: Instant::now(),
            }),
        }
    }

    /// Waits until a request may be sent.
    pub async fn acquire(&self) {
        if self.limit.per_second <= 0.0 || !self.limit.per_second.is_finite() {
            return;
        }
        let wait = {
            // A poisoned lock only means another request panicked mid-update; the numbers are
            // still usable.
            let mut bucket = self
                .bucket
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let now = Instant::now();
            let elapsed = now.duration_since(bucket.refilled_at).as_secs_f64();
            let capacity = f64::from(self.limit.burst.max(1));
            bucket.tokens = (bucket.tokens + elapsed * self.limit.per_second).min(capacity);
            bucket.refilled_at = now;
            bucket.tokens -= 1.0;
            if bucket.tokens >= 0.0 {
                None
            } else {
                Some(Duration::from_secs_f64(
                    -bucket.tokens / self.limit.per_second,
                ))
            }
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The burst goes at once; the request after it waits for one token's refill (Tokio's paused
    /// clock, so this measures the limiter, not the machine).
    #[tokio::test(start_paused = true)]
    async fn burst_then_refill_rate() {
        let bucket = TokenBucket::new(RateLimit {
            per_second: 2.0,
            burst: 3,
        });
        let start = Instant::now();
        for _ in 0..3 {
            bucket.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        bucket.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        bucket.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_period_refills_up_to_the_burst_only() {
        let bucket = TokenBucket::new(RateLimit {
            per_second: 1.0,
            burst: 2,
        });
        tokio::time::sleep(Duration::from_secs(100)).await;
        let start = Instant::now();
        bucket.acquire().await;
        bucket.acquire().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        bucket.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_rate_means_unlimited() {
        let bucket = TokenBucket::new(RateLimit {
            per_second: 0.0,
            burst: 1,
        });
        let start = Instant::now();
        for _ in 0..100 {
            bucket.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
