//! For tests: [`GivesUpAfter`], a watch that stands for a collective whose peer died: it
//! gives up once its time has been waited, and remembers how it was asked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::StreamWatch;
use crate::error::{Error, Result};

/// Gives up with `CollectiveTimedOut` once `after` has been waited; counts its checks
/// and remembers the longest wait it was asked about.
pub(crate) struct GivesUpAfter {
    pub(crate) after: Duration,
    checks: AtomicUsize,
    longest_ms: AtomicUsize,
}

impl GivesUpAfter {
    pub(crate) fn new(after: Duration) -> Arc<GivesUpAfter> {
        Arc::new(GivesUpAfter {
            after,
            checks: AtomicUsize::new(0),
            longest_ms: AtomicUsize::new(0),
        })
    }

    /// How many times [`check`](StreamWatch::check) was asked.
    pub(crate) fn checks(&self) -> usize {
        self.checks.load(Ordering::SeqCst)
    }

    /// The longest wait it was asked about, in whole milliseconds.
    pub(crate) fn longest_ms(&self) -> usize {
        self.longest_ms.load(Ordering::SeqCst)
    }
}

impl StreamWatch for GivesUpAfter {
    fn check(&self, waited: Duration) -> Result<()> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        let ms = usize::try_from(waited.as_millis()).unwrap_or(usize::MAX);
        self.longest_ms.fetch_max(ms, Ordering::SeqCst);
        if waited >= self.after {
            return Err(Error::CollectiveTimedOut {
                timeout: self.after,
            });
        }
        Ok(())
    }

    fn overdue(&self, waited: Duration) -> Option<Error> {
        (waited >= self.after).then_some(Error::CollectiveTimedOut {
            timeout: self.after,
        })
    }
}
