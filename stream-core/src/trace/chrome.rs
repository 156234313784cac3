//! Writes a [`Log`] as Chrome's trace event format (the JSON object form): a process per
//! device, a thread (track) per stream, a complete event (`"ph":"X"`) per operation, and
//! a flow (`"ph":"s"` to `"ph":"f"`) per fork or join arrow. Times are microseconds
//! since the trace was made.
//!
//! In two steps: [`resolve`] reads every event's GPU time (the only part that needs the
//! GPU), and [`render`] turns the resulting [`Timeline`] into text (tested without one).

use std::fmt::Write;

use super::recorder::{Category, Clock, Log};
use crate::driver::event::RawEvent;
use crate::error::{Error, Result};

/// The JSON text of `log`; an [`Error::Trace`] while any of its events has not completed.
pub(super) fn write(log: &Log) -> Result<String> {
    Ok(render(&resolve(log)?))
}

/// A log with its times read: what [`render`] writes.
#[derive(Debug, Default)]
struct Timeline {
    /// Per device: its ordinal and name.
    processes: Vec<(usize, String)>,
    /// Per track: the index of its process, and its number among that device's tracks.
    tracks: Vec<(usize, usize)>,
    slices: Vec<TimedSlice>,
    /// Arrows between slices, by index.
    flows: Vec<(&'static str, usize, usize)>,
    lost: u64,
}

/// A slice with its start and end in microseconds.
#[derive(Debug)]
struct TimedSlice {
    name: &'static str,
    category: Category,
    track: usize,
    start: f64,
    end: f64,
    bytes: Option<u64>,
}

/// Reads the GPU time of every event of `log`.
fn resolve(log: &Log) -> Result<Timeline> {
    let processes = log
        .clocks
        .iter()
        .map(|c| {
            let name = c.device.name().unwrap_or_else(|_| "unknown".into());
            (c.device.ordinal(), name)
        })
        .collect();
    let mut per_device = vec![0usize; log.clocks.len()];
    let tracks = log
        .tracks
        .iter()
        .map(|t| {
            per_device[t.clock] += 1;
            (t.clock, per_device[t.clock])
        })
        .collect();
    let mut slices = Vec::with_capacity(log.slices.len());
    for slice in &log.slices {
        let clock = &log.clocks[log.tracks[slice.start.track].clock];
        let start = micros(clock, &slice.start.event)?;
        let end = match &slice.end {
            Some(end) => micros(clock, end)?,
            None => start,
        };
        slices.push(TimedSlice {
            name: slice.name,
            category: slice.category,
            track: slice.start.track,
            start,
            end,
            bytes: slice.bytes,
        });
    }
    let flows = log.flows.iter().map(|f| (f.name, f.from, f.to)).collect();
    Ok(Timeline {
        processes,
        tracks,
        slices,
        flows,
        lost: log.lost,
    })
}

/// Microseconds from the trace's start to `event`'s timestamp, on `clock`'s device.
fn micros(clock: &Clock, event: &RawEvent) -> Result<f64> {
    let context = &clock.device.inner.context;
    match event.elapsed_ms_since(&clock.base, context)? {
        Some(ms) => Ok(clock.host_offset.as_secs_f64() * 1e6 + f64::from(ms) * 1e3),
        None => Err(Error::Trace {
            reason: "an operation it recorded has not completed on the GPU yet; write it \
                     after the scopes it records have ended",
        }),
    }
}

/// The JSON text of `timeline`.
fn render(timeline: &Timeline) -> String {
    let mut events: Vec<String> = Vec::new();
    for (pid, name) in &timeline.processes {
        events.push(format!(
            "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"GPU {pid}: {}\"}}}}",
            escape(name)
        ));
    }
    let pid_of = |track: usize| timeline.processes[timeline.tracks[track].0].0;
    for (tid, &(_, number)) in timeline.tracks.iter().enumerate() {
        events.push(format!(
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"stream {number}\"}}}}",
            pid_of(tid),
            tid + 1,
        ));
    }
    for s in &timeline.slices {
        let mut args = String::new();
        if let Some(bytes) = s.bytes {
            let _ = write!(args, "\"bytes\":{bytes}");
            if s.end > s.start {
                let _ = write!(
                    args,
                    ",\"GB/s\":{:.2}",
                    bytes as f64 / (s.end - s.start) / 1e3
                );
            }
        }
        events.push(format!(
            "{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{{args}}}}}",
            escape(s.name),
            s.category.name(),
            pid_of(s.track),
            s.track + 1,
            s.start,
            (s.end - s.start).max(0.0),
        ));
    }
    for (id, &(name, from, to)) in timeline.flows.iter().enumerate() {
        for (phase, slice) in [("s", from), ("f", to)] {
            let s = &timeline.slices[slice];
            let bind = if phase == "f" { ",\"bp\":\"e\"" } else { "" };
            events.push(format!(
                "{{\"ph\":\"{phase}\",\"id\":{},\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.3}{bind}}}",
                id + 1,
                escape(name),
                escape(name),
                pid_of(s.track),
                s.track + 1,
                s.start,
            ));
        }
    }
    format!(
        "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n{}\n],\"otherData\":{{\"recorder\":\"stream-core\",\"lost_records\":{}}}}}\n",
        events.join(",\n"),
        timeline.lost
    )
}

/// `text` as the inside of a JSON string.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_json_strings_valid() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\u000ad");
        assert_eq!(escape("kernel<f32>"), "kernel<f32>");
    }

    /// Two GPUs, a track on each and a second on GPU 0; a copy, a fork point on each side
    /// of an arrow, and a lost record: the JSON names every process and track, gives each
    /// slice its category, times, bytes and rate, binds the arrow's end to its slice, and
    /// counts the lost record.
    #[test]
    fn a_timeline_renders_as_chrome_trace_events() {
        let slice = |name, category, track, start, end, bytes| TimedSlice {
            name,
            category,
            track,
            start,
            end,
            bytes,
        };
        let timeline = Timeline {
            processes: vec![(0, "NVIDIA H200".into()), (1, "GPU \"B\"".into())],
            tracks: vec![(0, 1), (1, 1), (0, 2)],
            slices: vec![
                slice(
                    "copy_to_device",
                    Category::Copy,
                    0,
                    10.0,
                    20.0,
                    Some(1_000_000),
                ),
                slice("fork", Category::Fork, 0, 20.0, 20.0, None),
                slice("fork", Category::Fork, 1, 21.5, 21.5, None),
                slice("k", Category::Kernel, 2, 30.0, 29.0, None),
            ],
            flows: vec![("fork", 1, 2)],
            lost: 3,
        };
        let json = render(&timeline);
        for part in [
            "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n",
            "\"name\":\"process_name\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"GPU 0: NVIDIA H200\"}",
            "\"args\":{\"name\":\"GPU 1: GPU \\\"B\\\"\"}",
            "\"name\":\"thread_name\",\"pid\":0,\"tid\":1,\"args\":{\"name\":\"stream 1\"}",
            "\"name\":\"thread_name\",\"pid\":1,\"tid\":2,\"args\":{\"name\":\"stream 1\"}",
            "\"name\":\"thread_name\",\"pid\":0,\"tid\":3,\"args\":{\"name\":\"stream 2\"}",
            "{\"ph\":\"X\",\"name\":\"copy_to_device\",\"cat\":\"copy\",\"pid\":0,\"tid\":1,\"ts\":10.000,\"dur\":10.000,\"args\":{\"bytes\":1000000,\"GB/s\":100.00}}",
            "{\"ph\":\"X\",\"name\":\"fork\",\"cat\":\"fork\",\"pid\":1,\"tid\":2,\"ts\":21.500,\"dur\":0.000,\"args\":{}}",
            // An end read before its start (clock rounding) is a slice of no duration.
            "\"name\":\"k\",\"cat\":\"kernel\",\"pid\":0,\"tid\":3,\"ts\":30.000,\"dur\":0.000",
            "{\"ph\":\"s\",\"id\":1,\"name\":\"fork\",\"cat\":\"fork\",\"pid\":0,\"tid\":1,\"ts\":20.000}",
            "{\"ph\":\"f\",\"id\":1,\"name\":\"fork\",\"cat\":\"fork\",\"pid\":1,\"tid\":2,\"ts\":21.500,\"bp\":\"e\"}",
            "],\"otherData\":{\"recorder\":\"stream-core\",\"lost_records\":3}}\n",
        ] {
            assert!(json.contains(part), "{part}\n  not in\n{json}");
        }
        assert_eq!(json.matches("\"ph\":").count(), 2 + 3 + 4 + 2);
    }

    /// An empty timeline is a valid trace with no events.
    #[test]
    fn an_empty_timeline_renders_an_empty_event_list() {
        assert_eq!(
            render(&Timeline::default()),
            "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n\n],\"otherData\":{\"recorder\":\"stream-core\",\"lost_records\":0}}\n"
        );
    }
}
