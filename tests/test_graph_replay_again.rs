//! A graph replayed again without the host waiting in between (`Scope::replay_again`):
//! back-to-back runs of a step whose every run reads what the previous one wrote, so a
//! run that overlapped or skipped another would leave another value; the graph's own
//! allocations are made and freed in every run. A graph with NCCL collectives is
//! refused here (`replay_again_with`: `test_nccl_graphs`, `test_nccl_graph_ranks`).
//!
//! GPU tests are reported as ignored without a CUDA device (see `gpu_tests::run`).

use gpu_tests::graph_kernels::affine_u32;
use gpu_tests::{device, ensure, Test, TestFn, TestResult};
use stream_core::{scope, DeviceVec, Graph, LaunchConfig};

fn main() {
    let gpu: Vec<Test> = vec![
        (
            "runs_replayed_again_follow_each_other_in_order",
            runs_replayed_again_follow_each_other_in_order as TestFn,
        ),
        (
            "a_scope_replays_again_after_other_work_and_waits_once",
            a_scope_replays_again_after_other_work_and_waits_once as TestFn,
        ),
    ];
    gpu_tests::run(&gpu, &[])
}

/// Elements of the step's state.
const LEN: usize = 4099;

/// The step: `acc = 2 * acc + 1`, through a temporary the graph allocates and frees
/// itself. From zero, `n` runs in order leave `2^n - 1` in every element.
fn doubling_step(acc: &mut DeviceVec<u32>) -> stream_core::Result<Graph<&mut DeviceVec<u32>>> {
    let device = acc.device().clone();
    let config = LaunchConfig::for_elements(LEN, 256);
    let (graph, ()) = device.capture(acc, |g, mut acc| {
        let mut doubled = g.alloc::<u32>(LEN)?;
        affine_u32(g, config, 2, 1, &acc, &mut doubled)?;
        affine_u32(g, config, 1, 0, &doubled, &mut acc)
    })?;
    Ok(graph)
}

/// One `replay`, then 29 `replay_again`, then one `wait`: `2^30 - 1` everywhere.
fn runs_replayed_again_follow_each_other_in_order() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut acc = dev.upload_vec(&vec![0u32; LEN])?;
    let runs = 30;
    {
        let mut graph = doubling_step(&mut acc)?;
        scope(&stream, |s| {
            let mut step = s.replay(&mut graph)?;
            for _ in 1..runs {
                step = s.replay_again(step)?;
            }
            step.wait().map(drop)
        })?;
    }
    let want = (1u32 << runs) - 1;
    let got = acc.to_host_vec()?;
    ensure!(
        got.iter().all(|&v| v == want),
        "after {runs} runs: {:?}, expected {want} everywhere",
        &got[..4]
    );
    Ok(())
}

/// Work of the scope between two runs (a fill of another buffer) is ordered between
/// them on the stream; the chain is waited for once, by the scope's end (no `wait`).
fn a_scope_replays_again_after_other_work_and_waits_once() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut acc = dev.upload_vec(&vec![0u32; LEN])?;
    let mut other = vec![0u32; LEN];
    {
        let mut graph = doubling_step(&mut acc)?;
        scope(&stream, |s| {
            let mut step = s.replay(&mut graph)?;
            let mut x = s.alloc::<u32>(LEN)?;
            s.fill(&mut x, 5)?;
            step = s.replay_again(step)?;
            step = s.replay_again(step)?;
            drop(step); // the scope's end waits for every run
            s.copy_to_host(&x, &mut other[..])?.wait().map(drop)
        })?;
    }
    let got = acc.to_host_vec()?;
    ensure!(
        other.iter().all(|&v| v == 5),
        "the fill between runs: {:?}",
        &other[..4]
    );
    ensure!(
        got.iter().all(|&v| v == 7),
        "after three runs: {:?}, expected 2^3 - 1 = 7 everywhere",
        &got[..4]
    );
    Ok(())
}
