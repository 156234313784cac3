//! Reads back the Chrome trace a `stream_core::trace::Trace` writes (test_trace): its
//! complete events, its arrows, its tracks and its count of lost records.

use serde_json::Value;
use stream_core::trace::Trace;

use crate::TestResult;

/// A complete event of the trace.
#[derive(Debug)]
pub struct Slice {
    /// The operation's name (`copy_to_device`, a kernel's name, ...).
    pub name: String,
    /// Its category (`copy`, `kernel`, `fork`, ...).
    pub cat: String,
    /// Its track: one per stream.
    pub tid: u64,
    /// Its start, in microseconds since the trace was made.
    pub ts: f64,
    /// Its duration in microseconds (0 for a fork or join point).
    pub dur: f64,
    /// The bytes it moved, for copies and collectives.
    pub bytes: Option<u64>,
}

/// The trace's JSON, parsed: its slices, and its flows as (phase, id, tid, ts).
pub struct Parsed {
    /// The complete events.
    pub slices: Vec<Slice>,
    /// The arrows' ends: (phase `s` or `f`, id, track, time).
    pub flows: Vec<(String, u64, u64, f64)>,
    /// How many tracks are named.
    pub tracks: usize,
    /// Records the trace could not make.
    pub lost: u64,
}

/// `trace` written as JSON and read back; an error if it cannot be written or is not
/// the format expected.
pub fn parse(trace: &Trace) -> TestResult<Parsed> {
    let json: Value = serde_json::from_str(&trace.to_chrome_json()?)
        .map_err(|e| format!("the trace is not JSON: {e}"))?;
    let events = json["traceEvents"]
        .as_array()
        .ok_or("no traceEvents array")?;
    let (mut slices, mut flows, mut tracks) = (Vec::new(), Vec::new(), 0);
    for e in events {
        let field = |k: &str| e[k].as_f64().ok_or(format!("{k} missing in {e}"));
        match e["ph"].as_str().ok_or(format!("no ph in {e}"))? {
            "X" => slices.push(Slice {
                name: e["name"].as_str().unwrap_or_default().to_owned(),
                cat: e["cat"].as_str().unwrap_or_default().to_owned(),
                tid: field("tid")? as u64,
                ts: field("ts")?,
                dur: field("dur")?,
                bytes: e["args"]["bytes"].as_u64(),
            }),
            "s" | "f" => flows.push((
                e["ph"].as_str().unwrap_or_default().to_owned(),
                field("id")? as u64,
                field("tid")? as u64,
                field("ts")?,
            )),
            "M" if e["name"] == "thread_name" => tracks += 1,
            "M" => {}
            other => return Err(format!("unexpected phase {other:?}").into()),
        }
    }
    let lost = json["otherData"]["lost_records"]
        .as_u64()
        .ok_or("no lost_records")?;
    Ok(Parsed {
        slices,
        flows,
        tracks,
        lost,
    })
}

/// The slices named `name`.
pub fn named<'p>(p: &'p Parsed, name: &str) -> Vec<&'p Slice> {
    p.slices.iter().filter(|s| s.name == name).collect()
}
