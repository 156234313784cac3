//! The benchmark's one error type: a message that says what failed and where.

use std::fmt;

/// A failed step of the benchmark, with the context it failed in.
#[derive(Debug)]
pub struct Error(String);

/// `Result<T, benchmarks::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with `message`.
    pub fn msg(message: impl Into<String>) -> Self {
        Error(message.into())
    }

    /// `true` when the error says there is no GPU or driver (the program then explains
    /// that it needs one).
    pub fn is_no_gpu(&self) -> bool {
        self.0.contains("no CUDA driver found") || self.0.contains("no CUDA device")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<stream_core::Error> for Error {
    fn from(e: stream_core::Error) -> Self {
        Error(e.to_string())
    }
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        let name = e
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{:?}", e.0));
        Error(format!("CUDA driver error {name}"))
    }
}

impl From<cudarc::cublas::result::CublasError> for Error {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        Error(format!("cuBLAS error {e:?}"))
    }
}

/// Adds what was being done to an error: `.context("raw: cuMemcpyHtoDAsync")?`.
pub trait Context<T> {
    /// Prefixes the error with `what`.
    fn context(self, what: &str) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {}", e.into())))
    }
}
