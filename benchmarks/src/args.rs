//! The command line: flags, their defaults, and the usage text.

use crate::{Case, CASES};

/// Rounds of every measurement in a full run.
pub const DEFAULT_REPEAT: usize = 5;
/// Rounds of every measurement with `--quick`, unless `--repeat` says otherwise.
pub const QUICK_REPEAT: usize = 2;
/// The most rounds `--repeat` accepts.
const MAX_REPEAT: usize = 1000;

/// The usage text of `--help` and of a mistake.
pub const USAGE: &str =
    "usage: bench [--quick] [--repeat N] [--case NAME[,NAME...]]... [--json PATH] [--device N] [--kernel-ratio R] [--list]

  --quick        small sizes and few samples (a smoke run of seconds); --repeat defaults to 2
  --repeat N     rounds of every measurement (default 5, with --quick 2): the table gives
                 each figure's median over the rounds and ours/raw's min, median and max;
                 PASS needs the median and the worst round to meet the target
  --case NAMES   run only these cases (repeatable, or comma-separated); see --list
  --json PATH    where to write every sample of every round (default bench.json)
  --device N     CUDA device ordinal (default 0)
  --kernel-ratio R  pipeline: kernel time / slower copy direction's time (default 1.0)
  --list         list the cases and exit

  BENCH_STAGING_SWEEP=1 adds the staging sweep to the pageable case (printed only)
  BENCH_STAGING_CACHE=1 adds the staged copies in three cache states to it (printed only)
  BENCH_STAGING_CONTENTION=1 adds the host memcpy and pinned DMA, alone and at once, to it (printed only)
  BENCH_STAGING_STRAGGLERS=1 adds a one-shot memcpy in one stripe per thread vs shared pieces (printed only)
  BENCH_LAUNCH_RANKS=1 adds tiny launches on one thread alone vs a thread per GPU at once to the launch case (printed only)
  BENCH_STAGING_RANKS=1 adds pageable round trips on one thread alone vs a thread per GPU at once (printed only)
  BENCH_SERVE_TIMELINE=1 adds per-request GPU timelines of the 1 MiB server loops to the serve case (printed only)
  BENCH_SERVE_BLOCKING_EVENTS=1 makes the serve case's raw event loop's events blocking-sync, as the library's are";

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the benchmark.
    Run(Args),
    /// `--list`: print the cases.
    List,
    /// `-h`, `--help`: print the usage.
    Help,
}

/// The parsed command line of a run.
#[derive(Debug)]
pub struct Args {
    /// `--quick`.
    pub quick: bool,
    /// `--kernel-ratio`.
    pub kernel_ratio: f64,
    /// `--repeat`, or its default for the mode.
    pub repeat: usize,
    /// The cases to run, in the table's order (all when none were named).
    pub cases: Vec<&'static Case>,
    /// `--json`.
    pub json: String,
    /// `--device`.
    pub device: usize,
}

/// Parses the arguments after the program's name. `Err` holds the message for the user
/// (with the usage where that helps).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut quick = false;
    let mut repeat = None;
    let mut parsed = Args {
        quick: false,
        kernel_ratio: 1.0,
        repeat: DEFAULT_REPEAT,
        cases: Vec::new(),
        json: "bench.json".to_owned(),
        device: 0,
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => quick = true,
            "--json" => parsed.json = value("--json")?,
            "--repeat" => {
                let v = value("--repeat")?;
                repeat = Some(
                    v.parse()
                        .ok()
                        .filter(|n| (1..=MAX_REPEAT).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "--repeat takes a whole number from 1 to {MAX_REPEAT}, not `{v}`"
                            )
                        })?,
                );
            }
            "--kernel-ratio" => {
                let v = value("--kernel-ratio")?;
                parsed.kernel_ratio = v
                    .parse()
                    .ok()
                    .filter(|r: &f64| r.is_finite() && *r > 0.0 && *r <= 100.0)
                    .ok_or_else(|| {
                        format!("--kernel-ratio takes a number in (0, 100], not `{v}`")
                    })?;
            }
            "--device" => {
                let v = value("--device")?;
                parsed.device = v
                    .parse()
                    .map_err(|_| format!("--device takes a number, not `{v}`"))?;
            }
            "--case" => {
                for name in value("--case")?.split(',').filter(|n| !n.is_empty()) {
                    let case = CASES.iter().find(|c| c.name == name).ok_or_else(|| {
                        let names: Vec<_> = CASES.iter().map(|c| c.name).collect();
                        format!("unknown case `{name}`; the cases are: {}", names.join(", "))
                    })?;
                    if !parsed.cases.iter().any(|c| c.name == case.name) {
                        parsed.cases.push(case);
                    }
                }
            }
            "--list" => return Ok(Command::List),
            "-h" | "--help" => return Ok(Command::Help),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    parsed.quick = quick;
    parsed.repeat = repeat.unwrap_or(if quick { QUICK_REPEAT } else { DEFAULT_REPEAT });
    if parsed.cases.is_empty() {
        parsed.cases = CASES.iter().collect();
    }
    // Run in the table's order whatever order they were named in.
    parsed
        .cases
        .sort_by_key(|c| CASES.iter().position(|k| k.name == c.name));
    Ok(Command::Run(parsed))
}

/// What `--list` prints: each case's name and what it measures, one a line.
pub fn case_list() -> String {
    CASES
        .iter()
        .map(|c| format!("{:<10} {}\n", c.name, c.what))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|a| a.to_string()))
    }

    fn run(args: &[&str]) -> Args {
        match parse_strs(args) {
            Ok(Command::Run(a)) => a,
            other => panic!("{args:?} should ask for a run, got {other:?}"),
        }
    }

    fn names(a: &Args) -> Vec<&'static str> {
        a.cases.iter().map(|c| c.name).collect()
    }

    #[test]
    fn defaults_are_a_full_run_of_every_case_in_five_rounds() {
        let a = run(&[]);
        assert!(!a.quick);
        assert_eq!(a.repeat, DEFAULT_REPEAT);
        assert_eq!(a.repeat, 5);
        assert_eq!(names(&a).len(), CASES.len());
        assert_eq!(
            (a.json.as_str(), a.device, a.kernel_ratio),
            ("bench.json", 0, 1.0)
        );
    }

    #[test]
    fn quick_defaults_to_two_rounds_and_an_explicit_repeat_wins_in_either_order() {
        let a = run(&["--quick"]);
        assert!(a.quick);
        assert_eq!(a.repeat, QUICK_REPEAT);
        assert_eq!(a.repeat, 2);
        assert_eq!(run(&["--quick", "--repeat", "7"]).repeat, 7);
        assert_eq!(run(&["--repeat", "7", "--quick"]).repeat, 7);
        assert_eq!(run(&["--repeat", "1"]).repeat, 1);
        assert!(!run(&["--repeat", "3"]).quick);
    }

    #[test]
    fn repeat_refuses_zero_junk_huge_and_a_missing_value() {
        for bad in ["0", "-1", "two", "1.5", "", "1001"] {
            let e = parse_strs(&["--repeat", bad]).unwrap_err();
            assert!(e.starts_with("--repeat takes a whole number"), "{bad}: {e}");
        }
        let e = parse_strs(&["--quick", "--repeat"]).unwrap_err();
        assert!(e.starts_with("--repeat needs a value"), "{e}");
    }

    #[test]
    fn list_and_help_stop_parsing() {
        assert!(matches!(parse_strs(&["--list"]), Ok(Command::List)));
        assert!(matches!(
            parse_strs(&["--quick", "--list", "--bogus"]),
            Ok(Command::List)
        ));
        assert!(matches!(parse_strs(&["-h"]), Ok(Command::Help)));
        assert!(matches!(parse_strs(&["--help"]), Ok(Command::Help)));
    }

    #[test]
    fn case_list_names_every_case_once_a_line() {
        let list = case_list();
        assert_eq!(list.lines().count(), CASES.len());
        for (line, case) in list.lines().zip(&CASES) {
            assert!(line.starts_with(case.name), "{line}");
            assert!(line.ends_with(case.what), "{line}");
        }
    }

    #[test]
    fn cases_run_in_the_table_order_once_each() {
        let a = run(&["--case", "sgemm,launch", "--case", "launch,,pageable"]);
        assert_eq!(names(&a), vec!["launch", "pageable", "sgemm"]);
        let e = parse_strs(&["--case", "nope"]).unwrap_err();
        assert!(
            e.starts_with("unknown case `nope`; the cases are: launch,"),
            "{e}"
        );
    }

    #[test]
    fn other_flags_take_checked_values() {
        let a = run(&[
            "--json",
            "out.json",
            "--device",
            "1",
            "--kernel-ratio",
            "0.5",
        ]);
        assert_eq!(
            (a.json.as_str(), a.device, a.kernel_ratio),
            ("out.json", 1, 0.5)
        );
        assert!(parse_strs(&["--kernel-ratio", "0"]).is_err());
        assert!(parse_strs(&["--kernel-ratio", "NaN"]).is_err());
        assert!(parse_strs(&["--device", "x"]).is_err());
        let e = parse_strs(&["--frobnicate"]).unwrap_err();
        assert!(
            e.starts_with("unknown argument `--frobnicate`\nusage: bench"),
            "{e}"
        );
    }

    #[test]
    fn usage_names_every_flag() {
        for flag in [
            "--quick",
            "--repeat N",
            "--case",
            "--json",
            "--device",
            "--kernel-ratio",
            "--list",
        ] {
            assert!(USAGE.lines().next().unwrap().contains(flag), "{flag}");
        }
    }
}
