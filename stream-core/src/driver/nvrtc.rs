//! Compiling CUDA C++ with NVRTC, for one device's architecture.

use std::ffi::CString;

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};

use super::module::Image;
use crate::error::{Error, Result};

/// Compiles `source` for compute capability `major.minor` and returns the CUBIN image.
///
/// `kernel` names the kernel that asked, for the error message. A compile error returns
/// [`Error::KernelCompile`] with NVRTC's log; a missing NVRTC library returns
/// [`Error::NvrtcNotFound`].
pub(crate) fn compile_cubin(
    kernel: &str,
    source: &str,
    (major, minor): (i32, i32),
) -> Result<Image> {
    // SAFETY: only `dlopen`s the NVRTC library by its well-known names, so that a missing
    // library is an `Err` rather than the panic of cudarc's lazy loader.
    if !unsafe { nvrtc_sys::is_culib_present() } {
        return Err(Error::NvrtcNotFound);
    }
    let c_source = CString::new(source).map_err(|_| {
        Error::from(crate::error::KernelCompile {
            kernel: kernel.to_owned(),
            log: "the CUDA source contains a NUL byte".to_owned(),
        })
    })?;
    let program =
        Program(nvrtc::create_program(&c_source, None).map_err(|e| nvrtc_error(kernel, e))?);
    let options = [
        format!("--gpu-architecture=sm_{major}{minor}"),
        "--std=c++17".to_owned(),
        "-default-device".to_owned(),
    ];
    // SAFETY: `program` was created above and is destroyed only by its `Drop`; the
    // options contain no NUL bytes (cudarc would panic on one).
    let compiled = unsafe { nvrtc::compile_program(program.0, &options) };
    if compiled.is_err() {
        // SAFETY: as above; the log exists after a compile attempt.
        let log = unsafe { nvrtc::get_program_log(program.0) }
            .map(c_chars_to_string)
            .unwrap_or_default();
        return Err(Error::from(crate::error::KernelCompile {
            kernel: kernel.to_owned(),
            log,
        }));
    }
    program
        .cubin()
        .map(Image::cubin)
        .map_err(|e| nvrtc_error(kernel, e))
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtc_sys::nvrtcProgram);

impl Program {
    fn cubin(&self) -> std::result::Result<Vec<u8>, nvrtc::NvrtcError> {
        let mut size = 0usize;
        // SAFETY: the program is alive and compiled; `size` is a valid out-pointer.
        unsafe { nvrtc_sys::nvrtcGetCUBINSize(self.0, &raw mut size) }.result()?;
        let mut image = vec![0u8; size];
        // SAFETY: `image` has the `size` bytes NVRTC asked for.
        unsafe { nvrtc_sys::nvrtcGetCUBIN(self.0, image.as_mut_ptr().cast()) }.result()?;
        Ok(image)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program`, destroyed once, here.
        let _ = unsafe { nvrtc::destroy_program(self.0) };
    }
}

fn nvrtc_error(kernel: &str, e: nvrtc::NvrtcError) -> Error {
    Error::from(crate::error::KernelCompile {
        kernel: kernel.to_owned(),
        log: format!("NVRTC failed: {e:?}"),
    })
}

fn c_chars_to_string(chars: Vec<std::ffi::c_char>) -> String {
    let bytes: Vec<u8> = chars
        .into_iter()
        .map(|c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).trim_end().to_owned()
}
