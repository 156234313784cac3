//! [`CompiledImages`]: the CUBINs NVRTC made in this process, by source and compute
//! capability, so that devices of one kind compile each source once.
//!
//! A process that drives several GPUs (a thread per GPU, or `Communicator::for_devices`
//! on one thread) loads each module into every device's context. Loading is cheap;
//! compiling is not (NVRTC and then ptxas: on a fresh H200 host the first step of
//! `expert_parallel` took 5.2 s with CUDA's compute cache off, 0.3 s with it warm). The
//! first device that needs a source compiles it; devices that need it meanwhile wait for
//! that image instead of compiling their own, and later ones take it at once. A compile
//! that fails is not kept: the next device compiles again and reports its own error.
//! Images stay for the life of the process, as the `'static` sources they come from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::driver::module::Image;
use crate::error::Result;

/// A source's text (compared by content: one constant may be placed at several
/// addresses) and the compute capability it is compiled for.
type Key = (&'static str, (i32, i32));

/// One source's image for one capability, once compiled. Its own lock, so that a
/// compile holds up only the devices that need the same image.
type Slot = Arc<Mutex<Option<Arc<Image>>>>;

/// The compiled images of a process ([`process`](Self::process)), or of a test.
#[derive(Default)]
pub(crate) struct CompiledImages {
    slots: Mutex<HashMap<Key, Slot>>,
}

impl CompiledImages {
    /// This process's images.
    pub(crate) fn process() -> &'static CompiledImages {
        static PROCESS: OnceLock<CompiledImages> = OnceLock::new();
        PROCESS.get_or_init(CompiledImages::default)
    }

    /// The image of `source` for `capability`: the one compiled before, or `compile`'s,
    /// kept when it succeeds. While one thread compiles a source for a capability, the
    /// others asking for it wait.
    pub(crate) fn get_or_compile(
        &self,
        source: &'static str,
        capability: (i32, i32),
        compile: impl FnOnce() -> Result<Image>,
    ) -> Result<Arc<Image>> {
        let key = (source, capability);
        let slot = Arc::clone(
            self.slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key)
                .or_default(),
        );
        // A compile that panicked left the slot empty: poison carries nothing to undo.
        let mut image = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(image) = image.as_ref() {
            return Ok(Arc::clone(image));
        }
        let compiled = Arc::new(compile()?);
        *image = Some(Arc::clone(&compiled));
        Ok(compiled)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    use super::*;
    use crate::error::Error;

    const SOURCE: &str = "extern \"C\" __global__ void k() {}";
    const OTHER: &str = "extern \"C\" __global__ void other() {}";

    fn image() -> Result<Image> {
        Image::ptx(SOURCE).ok_or(Error::NvrtcNotFound)
    }

    #[test]
    fn a_source_is_compiled_once_per_capability() {
        let images = CompiledImages::default();
        let compiles = AtomicUsize::new(0);
        let compile = || {
            compiles.fetch_add(1, Ordering::Relaxed);
            image()
        };
        let first = images.get_or_compile(SOURCE, (9, 0), compile).unwrap();
        let again = images.get_or_compile(SOURCE, (9, 0), compile).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // The same text at another address (a constant copied into two statics).
        let copy: &'static str = Box::leak(SOURCE.to_owned().into_boxed_str());
        assert_ne!(copy.as_ptr(), SOURCE.as_ptr());
        let same_text = images.get_or_compile(copy, (9, 0), compile).unwrap();
        assert!(Arc::ptr_eq(&first, &same_text));
        assert_eq!(compiles.load(Ordering::Relaxed), 1);
        // Another capability, another source: compiled apart.
        let other_kind = images.get_or_compile(SOURCE, (8, 0), compile).unwrap();
        let other_source = images.get_or_compile(OTHER, (9, 0), compile).unwrap();
        assert!(!Arc::ptr_eq(&first, &other_kind));
        assert!(!Arc::ptr_eq(&first, &other_source));
        assert_eq!(compiles.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_failed_compile_is_not_kept() {
        let images = CompiledImages::default();
        let failed = images.get_or_compile(SOURCE, (9, 0), || Err(Error::NvrtcNotFound));
        assert!(matches!(failed, Err(Error::NvrtcNotFound)));
        let compiles = AtomicUsize::new(0);
        let compile = || {
            compiles.fetch_add(1, Ordering::Relaxed);
            image()
        };
        images.get_or_compile(SOURCE, (9, 0), compile).unwrap();
        assert_eq!(compiles.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_compile_that_panicked_leaves_the_slot_to_the_next() {
        let images = CompiledImages::default();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            images.get_or_compile(SOURCE, (9, 0), || panic!("NVRTC crashed"))
        }));
        assert!(panicked.is_err());
        let compiled = images.get_or_compile(SOURCE, (9, 0), image);
        assert!(compiled.is_ok());
    }

    #[test]
    fn devices_asking_at_once_wait_for_one_compile() {
        const DEVICES: usize = 8;
        let images = CompiledImages::default();
        let compiles = AtomicUsize::new(0);
        let start = Barrier::new(DEVICES);
        let got: Vec<Arc<Image>> = std::thread::scope(|threads| {
            let handles: Vec<_> = (0..DEVICES)
                .map(|_| {
                    threads.spawn(|| {
                        start.wait();
                        images.get_or_compile(SOURCE, (9, 0), || {
                            compiles.fetch_add(1, Ordering::Relaxed);
                            // Long enough for every other thread to arrive meanwhile.
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            image()
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert_eq!(compiles.load(Ordering::Relaxed), 1);
        assert!(got.iter().all(|image| Arc::ptr_eq(image, &got[0])));
    }
}
