//! [`SpareEvents`]: the completion thread's spent events, kept for reuse, of the two
//! kinds its modes record ([`EventKind`]).
//!
//! # Why two kinds
//!
//! Sleeping in `cuEventSynchronize` needs a `CU_EVENT_BLOCKING_SYNC` event, and such an
//! event is not free on the GPU: measured on a 2x H200 host (2026-11-27, `bench --case
//! serve`), sixteen streams of 1 MiB requests each followed by a blocking-sync event move
//! 0.84x the requests per second of the same loop with plain events (raw driver calls on
//! both sides). The polling mode never sleeps on an event, so it records plain ones.

use std::sync::Arc;

use super::completion_mode::CompletionMode;
use crate::driver::context::PrimaryContext;
use crate::driver::event::RawEvent;
use crate::error::Result;

/// Spare events kept per kind; beyond that, spent events are destroyed. Enough for
/// every request of a busy server in flight at once.
const SPARE_EVENTS: usize = 1024;

/// Which event an operation records after its work, by the completion mode at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventKind {
    /// `CU_EVENT_BLOCKING_SYNC`: the thread may sleep on it ([`CompletionMode::Sleep`]).
    Blocking,
    /// Without the flag: only queried ([`CompletionMode::Poll`]); cheaper on the GPU.
    Polled,
}

impl EventKind {
    /// The kind the thread's `mode` waits on.
    pub(super) fn for_mode(mode: CompletionMode) -> EventKind {
        match mode {
            CompletionMode::Sleep => EventKind::Blocking,
            CompletionMode::Poll => EventKind::Polled,
        }
    }

    /// A new event of this kind in `context`.
    pub(super) fn create(self, context: &Arc<PrimaryContext>) -> Result<RawEvent> {
        match self {
            EventKind::Blocking => RawEvent::new_blocking(context),
            EventKind::Polled => RawEvent::new(context),
        }
    }
}

/// Spent events of each kind (of this device's context, or of a context released since:
/// checked when taken).
#[derive(Default)]
pub(super) struct SpareEvents {
    blocking: Vec<RawEvent>,
    polled: Vec<RawEvent>,
}

impl SpareEvents {
    fn of_kind(&mut self, kind: EventKind) -> &mut Vec<RawEvent> {
        match kind {
            EventKind::Blocking => &mut self.blocking,
            EventKind::Polled => &mut self.polled,
        }
    }

    /// A spare of `kind` belonging to `context`, if one is kept, and the spares of
    /// released contexts met on the way (to be dropped outside the caller's lock).
    pub(super) fn take(
        &mut self,
        kind: EventKind,
        context: &Arc<PrimaryContext>,
    ) -> (Option<RawEvent>, Vec<RawEvent>) {
        let spares = self.of_kind(kind);
        let mut stale = Vec::new();
        while let Some(event) = spares.pop() {
            if event.belongs_to(context) {
                return (Some(event), stale);
            }
            stale.push(event); // of a context released since: gone with it
        }
        (None, stale)
    }

    /// Keeps `event` (whose last record has completed) for reuse.
    pub(super) fn put(&mut self, kind: EventKind, event: RawEvent) {
        self.of_kind(kind).push(event);
    }

    /// The spares beyond [`SPARE_EVENTS`] of each kind, to be dropped outside the lock.
    pub(super) fn excess(&mut self) -> Vec<RawEvent> {
        let mut excess = Vec::new();
        for spares in [&mut self.blocking, &mut self.polled] {
            if spares.len() > SPARE_EVENTS {
                excess.extend(spares.split_off(SPARE_EVENTS));
            }
        }
        excess
    }
}
