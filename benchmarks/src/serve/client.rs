//! The clients of the server loop: each one's pinned request and reply buffers (and
//! device buffers, in the loop that keeps them), the one request's work both designs
//! issue, and the check of a reply against the CPU.

use stream_core::{DeviceVec, Error as CoreError, PinnedBuffer, Scope};

use crate::cuda::{self, work_config, work_reference};
use crate::env::Env;
use crate::error::{Error, Result};

/// Concurrent clients (and streams) of the server loop.
pub(super) const CLIENTS: usize = 16;

/// Kernel iterations per element, as in case 5.
pub(super) const ITERS: u32 = 32;

pub(super) fn input(i: usize) -> f32 {
    (i % 1021) as f32 * 0.5 - 200.0
}

/// What one client owns between requests: its request and reply buffers (pinned), and,
/// in the loop that keeps them, the device buffers its requests use.
pub(super) struct Client {
    pub(super) input: PinnedBuffer<f32>,
    pub(super) output: PinnedBuffer<f32>,
    pub(super) kept: Option<(DeviceVec<f32>, DeviceVec<f32>)>,
}

/// `CLIENTS` clients with requests of `elems` elements; with `keep_device_buffers`, each
/// also owns the device buffers of its requests.
pub(super) fn client_buffers(
    env: &Env,
    elems: usize,
    keep_device_buffers: bool,
) -> Result<Vec<Client>> {
    (0..CLIENTS)
        .map(|_| {
            let mut input_buffer = env.dev.alloc_pinned::<f32>(elems)?;
            for (j, v) in input_buffer.iter_mut().enumerate() {
                *v = input(j);
            }
            let mut output = env.dev.alloc_pinned::<f32>(elems)?;
            output.fill(f32::NAN);
            let kept = match keep_device_buffers {
                true => Some((env.dev.alloc_vec(elems)?, env.dev.alloc_vec(elems)?)),
                false => None,
            };
            Ok(Client {
                input: input_buffer,
                output,
                kept,
            })
        })
        .collect()
}

/// One request's work, in both designs: the upload, the kernel and the download, into
/// device memory allocated for the request (stream-ordered) or into the client's own.
pub(super) fn request_work<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    client: &'env mut Client,
) -> std::result::Result<(), CoreError> {
    let Client {
        input,
        output,
        kept,
    } = client;
    match kept {
        Some((x, y)) => {
            let mut x = s.attach(x)?;
            s.copy_to_device(&input[..], &mut x)?;
            let mut y = s.attach(y)?;
            cuda::work_f32(s, work_config(x.len()), ITERS, &x, &mut y)?;
            let _reply = s.copy_to_host(&y, &mut output[..])?;
        }
        None => {
            let x = s.upload(&input[..])?;
            let mut y = s.alloc::<f32>(x.len())?;
            cuda::work_f32(s, work_config(x.len()), ITERS, &x, &mut y)?;
            let _reply = s.copy_to_host(&y, &mut output[..])?;
        }
    }
    Ok(())
}

/// Checks every 997th element and the last of one reply.
pub(super) fn check_reply(who: &str, out: &[f32]) -> Result<()> {
    for j in (0..out.len()).step_by(997).chain([out.len() - 1]) {
        let want = work_reference(input(j), ITERS);
        if out[j].to_bits() != want.to_bits() {
            return Err(Error::msg(format!(
                "{who}: reply element {j} is {} but the CPU computes {want}",
                out[j]
            )));
        }
    }
    Ok(())
}
