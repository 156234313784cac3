//! Where the ranks of an `srun` step meet when the job did not export `MASTER_ADDR` and
//! `MASTER_PORT`: rank 0's host is the first node of the step's node list (Slurm places
//! task 0 on the first node of the step under its block and cyclic distributions), and
//! the port follows the job's id, so every rank of the step derives the same two from
//! what Slurm set. Host code only: parsing Slurm's compressed host lists
//! (`gpu[01-04,07],login1`).

/// Rank 0's host for the step, from `SLURM_STEP_NODELIST` (or the job's node list when
/// the step's is absent): `None` when neither is set or the list cannot be read.
pub(super) fn rank_zero_host(lookup: &impl Fn(&str) -> Option<String>) -> Option<String> {
    [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .iter()
    .find_map(|name| lookup(name))
    .and_then(|list| first_host(&list))
}

/// The meeting port for the job `SLURM_JOB_ID`: `20000 + id % 10000`, below the
/// ephemeral range Linux hands out (32768 up), so it is not the local end of some
/// connection; `None` without a job id that is a number.
pub(super) fn job_port(lookup: &impl Fn(&str) -> Option<String>) -> Option<u16> {
    let id: u64 = lookup("SLURM_JOB_ID")?.trim().parse().ok()?;
    Some(20_000 + (id % 10_000) as u16)
}

/// The first host of a Slurm host list: `"gpu[01-04,07],login1"` gives `"gpu01"`,
/// `"rack[2-3]-n[5,9]"` gives `"rack2-n5"` (the first of each bracket, zeros kept),
/// `"a,b"` gives `"a"`; `None` for an empty or malformed list.
pub(super) fn first_host(list: &str) -> Option<String> {
    let mut host = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                // The bracket's first number (up to `-`, `,` or `]`), then skip to `]`.
                let mut first = String::new();
                let mut closed = false;
                let mut in_first = true;
                for c in chars.by_ref() {
                    match c {
                        ']' => {
                            closed = true;
                            break;
                        }
                        '-' | ',' => in_first = false,
                        c if in_first => first.push(c),
                        _ => {}
                    }
                }
                if !closed || first.is_empty() || !first.chars().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                host.push_str(&first);
            }
            ']' => return None,
            c if c.is_whitespace() => return None,
            c => host.push(c),
        }
    }
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::{first_host, job_port, rank_zero_host};

    #[test]
    fn the_first_host_of_a_compressed_list() {
        assert_eq!(first_host("node001").as_deref(), Some("node001"));
        assert_eq!(first_host("a,b,c").as_deref(), Some("a"));
        assert_eq!(first_host("gpu[01-04,07],login1").as_deref(), Some("gpu01"));
        assert_eq!(first_host("gpu[07,01-04]").as_deref(), Some("gpu07"));
        assert_eq!(first_host("nid00[1-3]").as_deref(), Some("nid001"));
        assert_eq!(first_host("rack[2-3]-n[5,9]").as_deref(), Some("rack2-n5"));
        assert_eq!(first_host("n[3]x").as_deref(), Some("n3x"));
        assert_eq!(
            first_host("10.0.0.[4-5]").as_deref(),
            Some("10.0.0.4"),
            "a prefix with dots"
        );
    }

    #[test]
    fn malformed_lists_name_no_host() {
        for list in ["", ",a", "gpu[01-04", "gpu[]", "gpu[a-b]", "gpu]1", "a b"] {
            assert_eq!(first_host(list), None, "{list:?}");
        }
    }

    #[test]
    fn the_step_list_first_and_the_port_from_the_job_id() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let both = vars(&[
            ("SLURM_JOB_NODELIST", "job[1-8]"),
            ("SLURM_STEP_NODELIST", "job[3-4]"),
            ("SLURM_JOB_ID", "4242424"),
        ]);
        assert_eq!(rank_zero_host(&both).as_deref(), Some("job3"));
        assert_eq!(job_port(&both), Some(22424));
        let job_only = vars(&[("SLURM_NODELIST", "old[9-10]"), ("SLURM_JOB_ID", "7")]);
        assert_eq!(rank_zero_host(&job_only).as_deref(), Some("old9"));
        assert_eq!(job_port(&job_only), Some(20007));
        let neither = vars(&[("SLURM_JOB_ID", "x")]);
        assert_eq!(rank_zero_host(&neither), None);
        assert_eq!(job_port(&neither), None);
    }
}
