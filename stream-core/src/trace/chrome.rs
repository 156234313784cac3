//! Writes a [`Log`] as Chrome's trace event format (the JSON object form): a process per
//! device, a thread (track) per stream, a complete event (`"ph":"X"`) per operation, and
//! a flow (`"ph":"s"` to `"ph":"f"`) per fork or join arrow. Times are microseconds
//! since the trace was made.

use std::fmt::Write;

use super::recorder::{Clock, Log};
use crate::driver::event::RawEvent;
use crate::error::{Error, Result};

/// The JSON text of `log`; an [`Error::Trace`] while any of its events has not completed.
pub(super) fn write(log: &Log) -> Result<String> {
    let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let mut first = true;
    let mut event = |out: &mut String, text: String| {
        if !first {
            out.push_str(",\n");
        }
        first = false;
        out.push_str(&text);
    };
    for clock in &log.clocks {
        let pid = clock.device.ordinal();
        let name = clock.device.name().unwrap_or_else(|_| "unknown".into());
        event(
            &mut out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"GPU {pid}: {}\"}}}}",
                escape(&name)
            ),
        );
    }
    let mut per_device = vec![0usize; log.clocks.len()];
    for (tid, track) in log.tracks.iter().enumerate() {
        per_device[track.clock] += 1;
        let pid = log.clocks[track.clock].device.ordinal();
        event(
            &mut out,
            format!(
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":\"stream {}\"}}}}",
                tid + 1,
                per_device[track.clock]
            ),
        );
    }
    let mut starts = Vec::with_capacity(log.slices.len());
    for slice in &log.slices {
        let track = &log.tracks[slice.start.track];
        let clock = &log.clocks[track.clock];
        let start = micros(clock, &slice.start.event)?;
        let end = match &slice.end {
            Some(end) => micros(clock, end)?,
            None => start,
        };
        starts.push(start);
        let mut args = String::new();
        if let Some(bytes) = slice.bytes {
            let _ = write!(args, "\"bytes\":{bytes}");
            if end > start {
                let _ = write!(args, ",\"GB/s\":{:.2}", bytes as f64 / (end - start) / 1e3);
            }
        }
        event(
            &mut out,
            format!(
                "{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{start:.3},\"dur\":{:.3},\"args\":{{{args}}}}}",
                escape(slice.name),
                slice.category.name(),
                clock.device.ordinal(),
                slice.start.track + 1,
                (end - start).max(0.0),
            ),
        );
    }
    for (id, flow) in log.flows.iter().enumerate() {
        for (phase, slice) in [("s", flow.from), ("f", flow.to)] {
            let track = &log.tracks[log.slices[slice].start.track];
            let bind = if phase == "f" { ",\"bp\":\"e\"" } else { "" };
            event(
                &mut out,
                format!(
                    "{{\"ph\":\"{phase}\",\"id\":{},\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.3}{bind}}}",
                    id + 1,
                    escape(flow.name),
                    flow.name,
                    log.clocks[track.clock].device.ordinal(),
                    log.slices[slice].start.track + 1,
                    starts[slice],
                ),
            );
        }
    }
    let _ = write!(
        out,
        "\n],\"otherData\":{{\"recorder\":\"stream-core\",\"lost_records\":{}}}}}\n",
        log.lost
    );
    Ok(out)
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
    #[test]
    fn escape_keeps_json_strings_valid() {
        assert_eq!(super::escape("a\"b\\c\nd"), "a\\\"b\\\\c\\u000ad");
        assert_eq!(super::escape("kernel<f32>"), "kernel<f32>");
    }
}
