//! The raw side of the NCCL case: each device's primary context, a stream and an
//! `ncclCommInitAll` communicator per device, raw buffers, and the raw NCCL calls the
//! library's collectives are measured against.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::{result, sys};
use cudarc::nccl::{result as nccl_result, sys as nccl_sys};
use stream_core::Device;

use crate::error::{Context, Error, Result};
use crate::raw::{RawDeviceMem, RawPoolMem, RawStream};

/// The raw side: each device's primary context, a stream and communicator per device.
pub(super) struct RawRanks {
    contexts: Vec<sys::CUcontext>,
    pub(super) streams: Vec<RawStream>,
    pub(super) comms: Vec<nccl_sys::ncclComm_t>,
}

/// Raw send and receive memory per rank.
pub(super) struct RawBuffers {
    count: usize,
    pub(super) send: Vec<RawMem>,
    pub(super) recv: Vec<RawMem>,
}

/// Where raw buffers come from: `cuMemAlloc`, or the device's stream-ordered pool, as
/// the library's buffers do (NCCL's cost per call differs between the two).
pub(super) enum RawMem {
    Plain(RawDeviceMem),
    Pool(RawPoolMem),
}

impl RawMem {
    pub(super) fn ptr(&self) -> u64 {
        match self {
            RawMem::Plain(m) => m.ptr,
            RawMem::Pool(m) => m.ptr,
        }
    }
}

impl RawRanks {
    /// Streams and an `ncclCommInitAll` communicator per device (`devices` hold the
    /// primary contexts retained for as long as the bench runs).
    pub(super) fn new(devices: &[Device]) -> Result<Self> {
        let mut contexts = Vec::new();
        let mut streams = Vec::new();
        for device in devices {
            let ordinal = device.ordinal() as i32;
            let dev = result::device::get(ordinal).context("cuDeviceGet")?;
            // SAFETY: `dev` came from cuDeviceGet; the retain is held by `device` too,
            // so the context outlives this struct (released at exit).
            let ctx =
                unsafe { result::primary_ctx::retain(dev) }.context("cuDevicePrimaryCtxRetain")?;
            // SAFETY: `ctx` is a live primary context.
            unsafe { result::ctx::set_current(ctx) }.context("cuCtxSetCurrent")?;
            streams.push(RawStream::new()?);
            contexts.push(ctx);
        }
        let ordinals: Vec<i32> = devices.iter().map(|d| d.ordinal() as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for one communicator per ordinal.
        unsafe {
            nccl_result::comm_init_all(comms.as_mut_ptr(), ordinals.len() as i32, ordinals.as_ptr())
        }
        .map_err(|e| Error::msg(format!("ncclCommInitAll: {e:?}")))?;
        let raw = RawRanks {
            contexts,
            streams,
            comms,
        };
        raw.bind(0)?;
        Ok(raw)
    }

    pub(super) fn bind(&self, rank: usize) -> Result<()> {
        // SAFETY: a live primary context (retained by the devices).
        unsafe { result::ctx::set_current(self.contexts[rank]) }.context("cuCtxSetCurrent")
    }

    pub(super) fn buffers(&self, count: usize, from_pool: bool) -> Result<RawBuffers> {
        let (mut send, mut recv) = (Vec::new(), Vec::new());
        let bytes = count.max(1) * 4;
        for rank in 0..self.contexts.len() {
            self.bind(rank)?;
            let one = || -> Result<RawMem> {
                Ok(match from_pool {
                    true => RawMem::Pool(RawPoolMem::new(bytes, &self.streams[rank])?),
                    false => RawMem::Plain(RawDeviceMem::new(bytes)?),
                })
            };
            send.push(one()?);
            recv.push(one()?);
        }
        self.bind(0)?;
        Ok(RawBuffers { count, send, recv })
    }

    /// Frees `buffers` in their own contexts.
    pub(super) fn free(&self, buffers: RawBuffers) -> Result<()> {
        let RawBuffers { send, recv, .. } = buffers;
        for (rank, (s, r)) in send.into_iter().zip(recv).enumerate() {
            self.bind(rank)?;
            drop((s, r));
        }
        self.bind(0)
    }

    pub(super) fn all_reduce(&self, buffers: &mut RawBuffers, iters: usize) -> Result<f64> {
        let n = self.comms.len();
        let start = Instant::now();
        for _ in 0..iters {
            if n > 1 {
                nccl_result::group_start()
                    .map_err(|e| Error::msg(format!("ncclGroupStart: {e:?}")))?;
            }
            for rank in 0..n {
                // SAFETY: both buffers hold `count` f32s of rank `rank`'s device, alive
                // until `free` (after the synchronisation below); the stream and
                // communicator are of that device.
                unsafe {
                    nccl_result::all_reduce(
                        buffers.send[rank].ptr() as *const _,
                        buffers.recv[rank].ptr() as *mut _,
                        buffers.count,
                        nccl_sys::ncclDataType_t::ncclFloat32,
                        nccl_sys::ncclRedOp_t::ncclSum,
                        self.comms[rank],
                        self.streams[rank].0 as nccl_sys::cudaStream_t,
                    )
                }
                .map_err(|e| Error::msg(format!("ncclAllReduce: {e:?}")))?;
            }
            if n > 1 {
                nccl_result::group_end().map_err(|e| Error::msg(format!("ncclGroupEnd: {e:?}")))?;
            }
        }
        for (rank, stream) in self.streams.iter().enumerate() {
            self.bind(rank)?;
            stream.sync()?;
        }
        self.bind(0)?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }
    /// `iters` all-to-alls of `buffers` (`count` elements per rank, split into one block
    /// per rank), each one NCCL group of a send and a receive per peer and rank, as
    /// NCCL's guide writes it; per all-to-all, the streams synchronised at the end.
    pub(super) fn all_to_all(&self, buffers: &mut RawBuffers, iters: usize) -> Result<f64> {
        let n = self.comms.len();
        let block = buffers.count / n;
        let block_bytes = (block * 4) as u64;
        let nccl = |call: &str, r: nccl_result::NcclError| Error::msg(format!("{call}: {r:?}"));
        let start = Instant::now();
        for _ in 0..iters {
            nccl_result::group_start().map_err(|e| nccl("ncclGroupStart", e))?;
            for rank in 0..n {
                for peer in 0..n {
                    let offset = peer as u64 * block_bytes;
                    let stream = self.streams[rank].0 as nccl_sys::cudaStream_t;
                    // SAFETY: block `peer` of rank `rank`'s send buffer (`count` f32s of
                    // that device, alive until `free`, after the synchronisation below);
                    // the stream and communicator are of that device.
                    unsafe {
                        nccl_result::send(
                            (buffers.send[rank].ptr() + offset) as *const _,
                            block,
                            nccl_sys::ncclDataType_t::ncclFloat32,
                            peer as i32,
                            self.comms[rank],
                            stream,
                        )
                    }
                    .map_err(|e| nccl("ncclSend", e))?;
                    // SAFETY: as above, block `peer` of the receive buffer.
                    unsafe {
                        nccl_result::recv(
                            (buffers.recv[rank].ptr() + offset) as *mut _,
                            block,
                            nccl_sys::ncclDataType_t::ncclFloat32,
                            peer as i32,
                            self.comms[rank],
                            stream,
                        )
                    }
                    .map_err(|e| nccl("ncclRecv", e))?;
                }
            }
            nccl_result::group_end().map_err(|e| nccl("ncclGroupEnd", e))?;
        }
        for (rank, stream) in self.streams.iter().enumerate() {
            self.bind(rank)?;
            stream.sync()?;
        }
        self.bind(0)?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }
}

impl Drop for RawRanks {
    fn drop(&mut self) {
        for (rank, comm) in self.comms.iter().enumerate() {
            let _ = self.bind(rank);
            // SAFETY: made in `new`, destroyed once; every use was synchronised.
            let _ = unsafe { nccl_result::comm_destroy(*comm) };
        }
        for rank in 0..self.streams.len() {
            let _ = self.bind(rank);
            drop(self.streams.pop());
        }
        let _ = self.bind(0);
    }
}
