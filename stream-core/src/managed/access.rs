//! [`ManagedAccess`]: how the host and the GPU share managed memory on a device, and
//! the one decision table every managed operation consults (so that the path for
//! devices without concurrent managed access is tested without such a device: see the
//! unit tests below, and [`Device::alloc_managed_with_access`](crate::Device::alloc_managed_with_access)
//! on any GPU).

use crate::driver::managed::Attach;
use crate::error::{Error, Result};

/// How the host and the GPU share a [`ManagedVec`](crate::ManagedVec), fixed when it is
/// allocated.
///
/// In both modes the types do the same thing: the host touches a `ManagedVec` only
/// while no scope has it attached (or, read-only, while scopes only read it), and
/// [`Scope::prefetch_to_host`](crate::Scope::prefetch_to_host) hands host access back
/// inside a scope. What differs is what the driver needs underneath.
///
/// ```no_run
/// use stream_core::{Device, ManagedAccess};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// match dev.managed_access()? {
///     Some(ManagedAccess::Concurrent) => println!("H100-class: host and GPU may work at once"),
///     Some(ManagedAccess::StreamAttached) => println!("the host waits while the GPU works"),
///     None => println!("no managed memory on this device"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ManagedAccess {
    /// The device has `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 1` (Pascal and
    /// later on Linux: V100, A100, H100, H200...): the host may touch managed memory
    /// while kernels run, pages migrate on demand, and prefetches move them ahead of
    /// time. The allocation is `CU_MEM_ATTACH_GLOBAL`.
    Concurrent,
    /// The device has `CONCURRENT_MANAGED_ACCESS = 0` (Windows, some Jetson boards,
    /// pre-Pascal GPUs), where the host touching memory that the GPU may use while any
    /// kernel runs faults. The vec is allocated `CU_MEM_ATTACH_HOST` (invisible to
    /// kernels, so the host may touch it whatever runs), attached for the device
    /// (`cuStreamAttachMemAsync`, global) only while a scope has it attached
    /// exclusively, and attached for the host again, stream-ordered, by
    /// `prefetch_to_host` or, after the scope, by the first host access (which waits for
    /// the device's housekeeping stream). A read-only attach (the host could read while a
    /// kernel runs) and a `prefetch_to_host` of part of the vec (the driver changes the
    /// attachment of whole allocations only) are refused with
    /// [`Error::ManagedNeedsConcurrentAccess`]; prefetches to the device are skipped
    /// (the driver moves the memory at each launch itself).
    ///
    /// [`Device::alloc_managed_with_access`](crate::Device::alloc_managed_with_access)
    /// chooses this mode on any device, which is how it is tested on an H100.
    StreamAttached,
}

/// What [`ManagedAccess::on_prefetch_to_device`] says to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToDevice {
    /// Enqueue `cuMemPrefetchAsync` to the scope's device.
    Prefetch,
    /// Nothing: the driver does not prefetch to a device without concurrent access.
    Skip,
}

/// What [`ManagedAccess::on_prefetch_to_host`] says to enqueue before the event that
/// hands the memory to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToHost {
    /// `cuMemPrefetchAsync` of the view's range to the host.
    Prefetch,
    /// `cuStreamAttachMemAsync(..., CU_MEM_ATTACH_HOST)` of the whole allocation.
    AttachToHost,
}

/// What [`ManagedAccess::on_host_access`] says to do before the host touches the vec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostAccess {
    /// Touch it.
    Ready,
    /// Attach it to the host on the housekeeping stream and wait for that stream first.
    AttachToHostAndWait,
}

impl ManagedAccess {
    /// The mode of a device whose `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS` is
    /// `attribute`.
    pub(crate) fn of_attribute(attribute: i32) -> Self {
        if attribute != 0 {
            ManagedAccess::Concurrent
        } else {
            ManagedAccess::StreamAttached
        }
    }

    /// `Ok(self)` when a device of mode `device` can give a vec this mode: either mode on a
    /// device with concurrent access (stream attachment is legal there too), only
    /// `StreamAttached` on one without.
    pub(crate) fn on(self, device: ManagedAccess) -> Result<Self> {
        match (self, device) {
            (ManagedAccess::Concurrent, ManagedAccess::StreamAttached) => {
                Err(Error::from(crate::error::ManagedNeedsConcurrentAccess {
                    what: "a ManagedVec with ManagedAccess::Concurrent",
                    instead: "allocate it with Device::alloc_managed, which picks \
                              ManagedAccess::StreamAttached on this device",
                }))
            }
            (mode, _) => Ok(mode),
        }
    }

    /// The attachment a new allocation gets.
    pub(crate) fn allocation_attach(self) -> Attach {
        match self {
            ManagedAccess::Concurrent => Attach::Global,
            ManagedAccess::StreamAttached => Attach::Host,
        }
    }

    /// What attaching a vec to a scope enqueues first: nothing, or a change of its
    /// attachment (`shared`: a read-only attach, which leaves the host able to read).
    pub(crate) fn on_attach(self, shared: bool) -> Result<Option<Attach>> {
        match (self, shared) {
            (ManagedAccess::Concurrent, _) => Ok(None),
            (ManagedAccess::StreamAttached, false) => Ok(Some(Attach::Global)),
            (ManagedAccess::StreamAttached, true) => {
                Err(Error::from(crate::error::ManagedNeedsConcurrentAccess {
                    what: "attach_managed_ref (a read-only attach, during which the host may \
                       still read the vec)",
                    instead: "attach it with attach_managed, which keeps the host away until \
                          the scope ends or prefetch_to_host hands it back",
                }))
            }
        }
    }

    /// What `prefetch_to_device` enqueues.
    pub(crate) fn on_prefetch_to_device(self) -> ToDevice {
        match self {
            ManagedAccess::Concurrent => ToDevice::Prefetch,
            ManagedAccess::StreamAttached => ToDevice::Skip,
        }
    }

    /// What `prefetch_to_host` of a view enqueues; `whole`: the view is the one
    /// `attach_managed` returned, moved (not a sub-range, not a reborrow), so that no
    /// other view of the allocation can reach the GPU afterwards.
    pub(crate) fn on_prefetch_to_host(self, whole: bool) -> Result<ToHost> {
        match (self, whole) {
            (ManagedAccess::Concurrent, _) => Ok(ToHost::Prefetch),
            (ManagedAccess::StreamAttached, true) => Ok(ToHost::AttachToHost),
            (ManagedAccess::StreamAttached, false) => {
                Err(Error::from(crate::error::ManagedNeedsConcurrentAccess {
                    what: "prefetch_to_host of part of a ManagedVec (a sub-range or a reborrow of \
                       the attached view)",
                    instead: "pass the view attach_managed returned, whole and by value, or read \
                          the vec on the host after the scope",
                }))
            }
        }
    }

    /// What the host does before touching a vec; `device_visible`: a scope attached it
    /// for the device and the host has not taken it back since.
    pub(crate) fn on_host_access(self, device_visible: bool) -> HostAccess {
        match (self, device_visible) {
            (ManagedAccess::StreamAttached, true) => HostAccess::AttachToHostAndWait,
            _ => HostAccess::Ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [ManagedAccess; 2] = [ManagedAccess::Concurrent, ManagedAccess::StreamAttached];

    fn refused(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(e @ Error::ManagedNeedsConcurrentAccess { .. }) => e.to_string(),
            other => panic!("expected ManagedNeedsConcurrentAccess, got {other:?}"),
        }
    }

    #[test]
    fn the_device_attribute_picks_the_mode() {
        assert_eq!(ManagedAccess::of_attribute(1), ManagedAccess::Concurrent);
        assert_eq!(
            ManagedAccess::of_attribute(0),
            ManagedAccess::StreamAttached
        );
    }

    #[test]
    fn a_device_without_concurrent_access_gives_only_stream_attached_vecs() {
        for device in BOTH {
            assert_eq!(
                ManagedAccess::StreamAttached.on(device).ok(),
                Some(ManagedAccess::StreamAttached)
            );
        }
        assert_eq!(
            ManagedAccess::Concurrent.on(ManagedAccess::Concurrent).ok(),
            Some(ManagedAccess::Concurrent)
        );
        let message = refused(ManagedAccess::Concurrent.on(ManagedAccess::StreamAttached));
        assert!(message.contains("Device::alloc_managed"), "{message}");
    }

    #[test]
    fn concurrent_memory_is_global_and_needs_no_attachment_changes() {
        let c = ManagedAccess::Concurrent;
        assert_eq!(c.allocation_attach(), Attach::Global);
        assert_eq!(c.on_attach(false).ok(), Some(None));
        assert_eq!(c.on_attach(true).ok(), Some(None));
        assert_eq!(c.on_prefetch_to_device(), ToDevice::Prefetch);
        assert_eq!(c.on_prefetch_to_host(true).ok(), Some(ToHost::Prefetch));
        assert_eq!(c.on_prefetch_to_host(false).ok(), Some(ToHost::Prefetch));
        assert_eq!(c.on_host_access(false), HostAccess::Ready);
        // Never set for concurrent vecs; harmless if it were.
        assert_eq!(c.on_host_access(true), HostAccess::Ready);
    }

    #[test]
    fn stream_attached_memory_is_the_hosts_unless_a_scope_holds_it_exclusively() {
        let s = ManagedAccess::StreamAttached;
        // Invisible to kernels while no scope has it: the host may touch it whatever runs.
        assert_eq!(s.allocation_attach(), Attach::Host);
        // An exclusive attach makes it the device's; the host is kept away by the borrow.
        assert_eq!(s.on_attach(false).ok(), Some(Some(Attach::Global)));
        // A read-only attach would leave the host reading while a kernel may run: refused.
        let message = refused(s.on_attach(true));
        assert!(message.contains("attach_managed_ref"), "{message}");
        assert!(message.contains("concurrentManagedAccess = 0"), "{message}");
        // The driver does not prefetch to such a device; it moves memory at launch.
        assert_eq!(s.on_prefetch_to_device(), ToDevice::Skip);
        // Back to the host: the whole allocation's attachment changes, so only the whole
        // attached view may go.
        assert_eq!(s.on_prefetch_to_host(true).ok(), Some(ToHost::AttachToHost));
        let message = refused(s.on_prefetch_to_host(false));
        assert!(message.contains("whole and by value"), "{message}");
        // After a scope, the first host access takes it back and waits.
        assert_eq!(s.on_host_access(true), HostAccess::AttachToHostAndWait);
        assert_eq!(s.on_host_access(false), HostAccess::Ready);
    }
}
