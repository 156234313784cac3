//! [`Shape`]: how much data the pipeline moves, in chunks of how many elements, and
//! how long its kernel runs per element.

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    /// Elements in all.
    pub(super) total: usize,
    /// Elements per chunk.
    pub(super) chunk: usize,
    /// Iterations of the kernel's inner loop.
    pub(super) iters: u32,
}

impl Shape {
    /// Chunks in all.
    pub(super) fn chunks(&self) -> usize {
        self.total / self.chunk
    }
}
