//! Kernel nodes: what a graph remembers of each kernel launch it recorded
//! ([`KernelRecord`]), the handles to a launch and to one of its scalar arguments
//! ([`KernelNode`], [`ScalarParam`]), and [`Graph::set_scalar`], which changes that
//! argument for later replays without capturing again
//! (`cuGraphExecKernelNodeSetParams`).
//!
//! Why changing a scalar is safe: the launch was checked and its arguments were made by
//! a `#[kernel]` wrapper; only one argument changes, to a value of the type the
//! declaration gives it (checked by `TypeId`), and every device address stays as
//! recorded. The result is an argument list the declaration's safe wrapper accepts from
//! safe code, which the declaration promises the kernel is memory-safe for.

use std::any::TypeId;
use std::ffi::c_void;
use std::marker::PhantomData;

use crate::driver::graph::{last_captured_node, KernelNodeLaunch, NodeHandle};
use crate::driver::module::Function;
use crate::error::{Error, Result};
use crate::graph::{Capture, Graph};
use crate::kernel::{Kernel, KernelParam, LaunchConfig};
use crate::memory::{value_bytes, DeviceRepr};
use crate::scope::KernelArgs;

/// The bytes of one CUDA kernel argument, in a slot aligned for any [`DeviceRepr`] type
/// (`u128`, 16 bytes, is the largest).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
struct ArgSlot([u8; 16]);

/// What a graph remembers of one kernel launch it recorded.
pub(crate) struct KernelRecord {
    kernel: &'static Kernel,
    function: Function,
    config: LaunchConfig,
    /// The launch's node in the captured graph, when the driver named it.
    node: Option<NodeHandle>,
    /// The launch's arguments, one slot per CUDA parameter, when the kernel describes
    /// its parameters (as `#[kernel]` does).
    args: Option<Vec<ArgSlot>>,
}

impl KernelRecord {
    /// `true` when its scalars can be changed: its node is known and its arguments
    /// recorded.
    fn updatable(&self) -> bool {
        self.node.is_some() && self.args.is_some()
    }

    /// Takes the launch of `other` (the same kernel, recorded by an update's capture),
    /// keeping this record's node, which names the instance's node.
    pub(super) fn take_launch(&mut self, other: KernelRecord) {
        self.function = other.function;
        self.config = other.config;
        self.args = other.args;
    }

    /// The kernel launched.
    pub(super) fn kernel(&self) -> &'static Kernel {
        self.kernel
    }
}

/// The bytes of `args`, one slot per CUDA parameter, when their kernel describes its
/// parameters (as many CUDA parameters as arguments, each at most 16 bytes); `None`
/// otherwise.
fn argument_bytes(args: &KernelArgs<'_, '_>) -> Option<Vec<ArgSlot>> {
    let (params, args) = (args.kernel().params, args.pointers());
    let sizes: Vec<usize> = params
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.cuda_size(), p.cuda_count()))
        .collect();
    let described = !params.is_empty() || args.is_empty();
    if !described || sizes.len() != args.len() || sizes.iter().any(|&s| s > 16) {
        return None;
    }
    let slots = sizes
        .iter()
        .zip(args)
        .map(|(&size, &arg)| {
            let mut slot = ArgSlot([0; 16]);
            // SAFETY: `arg` points to a live value of `size` bytes: the promise the
            // arguments carry (`scope::launch`, which alone makes them) is that a kernel
            // that describes its parameters describes exactly these; copied byte by byte
            // (no alignment needed) into the slot, which has 16 >= `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(arg.cast::<u8>(), slot.0.as_mut_ptr(), size) };
            slot
        })
        .collect();
    Some(slots)
}

impl<'g> Capture<'g> {
    /// Launches (records) the kernel of `args` on the capture's stream and remembers
    /// the launch.
    pub(crate) fn record_launch(
        &self,
        config: LaunchConfig,
        mut args: KernelArgs<'_, 'g>,
    ) -> Result<()> {
        self.set_last_kernel(None);
        // The capture's scope has the capture's brand, the one the arguments carry.
        crate::scope::launch_in_scope(self.scope(), config, args.reborrow())?;
        let kernel = args.kernel();
        if config.is_empty() {
            // An empty launch records nothing.
            return Ok(());
        }
        let function = kernel.load(&self.graph_device().inner)?.function;
        let node = last_captured_node(self.capture_stream())?;
        let args = argument_bytes(&args);
        let index = self.state().push_kernel(KernelRecord {
            kernel,
            function,
            config,
            node,
            args,
        });
        self.set_last_kernel(Some(index));
        Ok(())
    }

    /// The last kernel launched through this capture (not through its forks, which
    /// have their own), as a handle for [`KernelNode::scalar`].
    ///
    /// Returns [`Error::GraphArgument`] when no kernel was launched through it yet, when
    /// the last launch was empty (it records nothing), or when the launch's node or
    /// arguments are not known (a kernel made without `#[kernel]`'s parameter
    /// description).
    ///
    /// ```no_run
    /// # use stream_core::{kernel, scope, Error, LaunchConfig, Stream};
    /// # const SRC: &str = "";
    /// #[kernel(cuda = SRC)]
    /// unsafe fn scale_f32(a: f32, y: &mut [f32]);
    /// # fn f(stream: &Stream) -> Result<(), Error> {
    /// let (mut graph, a) = stream.device().capture((), |g, ()| {
    ///     let mut y = g.alloc_zeroed::<f32>(1024)?;
    ///     scale_f32(g, LaunchConfig::for_elements(1024, 256), 2.0, &mut y)?;
    ///     g.last_kernel()?.scalar::<f32>("a")
    /// })?;
    /// graph.set_scalar(a, 3.0)?; // later replays scale by 3
    /// scope(stream, |s| s.replay(&mut graph).map(drop))?;
    /// # Ok(()) }
    /// ```
    pub fn last_kernel(&self) -> Result<KernelNode> {
        let Some(index) = self.last_kernel_index() else {
            return Err(Error::from(crate::error::GraphArgument {
                reason: "no kernel was launched through this capture (a fork's launches \
                         are the fork's own), or its last launch was empty and recorded \
                         nothing"
                    .to_owned(),
            }));
        };
        let status = self
            .state()
            .with_kernel(index, |k| (k.kernel, k.updatable()));
        let Some((kernel, updatable)) = status else {
            return Err(Error::from(crate::error::GraphArgument {
                reason: "the capture lost track of its last kernel".to_owned(),
            }));
        };
        if !updatable {
            return Err(Error::from(crate::error::GraphArgument {
                reason: format!(
                    "the node or the arguments of kernel `{}` are not known (a kernel made \
                     without `#[kernel]`'s description of its parameters), so its \
                     arguments cannot be changed",
                    kernel.name()
                ),
            }));
        }
        Ok(KernelNode {
            graph: self.state().id(),
            index,
            kernel,
        })
    }
}

/// A kernel launch recorded into a graph (see [`Capture::last_kernel`]): names its
/// scalar arguments for [`Graph::set_scalar`].
#[derive(Debug, Clone, Copy)]
pub struct KernelNode {
    graph: u64,
    index: usize,
    kernel: &'static Kernel,
}

impl KernelNode {
    /// The kernel's name.
    pub fn kernel_name(&self) -> &'static str {
        self.kernel.name()
    }

    /// A handle to the scalar parameter `name` of this launch, of type `T`, or
    /// [`Error::GraphArgument`] when the declaration has no scalar parameter `name`
    /// (the message lists those it has) or declares it of another type.
    pub fn scalar<T: DeviceRepr>(&self, name: &str) -> Result<ScalarParam<T>> {
        let kernel = self.kernel.name();
        let mut slot = 0;
        for param in self.kernel.params {
            match *param {
                KernelParam::Scalar {
                    name: declared,
                    type_name,
                    type_id,
                    ..
                } if declared == name => {
                    if type_id != TypeId::of::<T>() {
                        return Err(Error::from(crate::error::GraphArgument {
                            reason: format!(
                                "parameter `{name}` of kernel `{kernel}` is a `{type_name}`, not \
                                 a `{}`",
                                std::any::type_name::<T>()
                            ),
                        }));
                    }
                    return Ok(ScalarParam {
                        graph: self.graph,
                        index: self.index,
                        slot,
                        kernel,
                        name: declared,
                        _type: PhantomData,
                    });
                }
                KernelParam::Slice { name: declared } if declared == name => {
                    return Err(Error::from(crate::error::GraphArgument {
                        reason: format!(
                            "parameter `{name}` of kernel `{kernel}` is device memory, not a \
                             scalar: a graph's memory is fixed when it is captured"
                        ),
                    }));
                }
                _ => slot += param.cuda_count(),
            }
        }
        let scalars: Vec<String> = self
            .kernel
            .params
            .iter()
            .filter_map(|p| match p {
                KernelParam::Scalar {
                    name, type_name, ..
                } => Some(format!("{name}: {type_name}")),
                KernelParam::Slice { .. } => None,
            })
            .collect();
        Err(Error::from(crate::error::GraphArgument {
            reason: format!(
                "kernel `{kernel}` has no parameter `{name}`; its scalar parameters are: {}",
                if scalars.is_empty() {
                    "none".to_owned()
                } else {
                    scalars.join(", ")
                }
            ),
        }))
    }
}

/// A scalar argument of one kernel launch of one graph, of type `T`: changed for later
/// replays by [`Graph::set_scalar`]. Plain data (`Copy`, `Send`), made inside the
/// capture by [`KernelNode::scalar`] and returned from it.
#[derive(Debug)]
pub struct ScalarParam<T> {
    graph: u64,
    index: usize,
    /// The CUDA parameter's position.
    slot: usize,
    kernel: &'static str,
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for ScalarParam<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for ScalarParam<T> {}

impl<T> ScalarParam<T> {
    /// The parameter's name in the kernel's declaration.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl<H> Graph<H> {
    /// Sets the argument `param` (of one of this graph's kernel launches) to `value` for
    /// every later replay, without capturing again (`cuGraphExecKernelNodeSetParams`).
    /// Replays already enqueued are not affected; none can be running, since a replay
    /// borrows the graph until it is known complete.
    ///
    /// Returns [`Error::GraphArgument`] when `param` belongs to another graph, and the
    /// driver's error when it refuses the change (the graph then stays as it was).
    /// See [`Capture::last_kernel`] for an example.
    pub fn set_scalar<T: DeviceRepr>(&mut self, param: ScalarParam<T>, value: T) -> Result<()> {
        if param.graph != self.id {
            return Err(Error::from(crate::error::GraphArgument {
                reason: format!(
                    "the handle to parameter `{}` of kernel `{}` belongs to another graph",
                    param.name, param.kernel
                ),
            }));
        }
        let refused = |what: &str| {
            Error::from(crate::error::GraphArgument {
                reason: format!(
                    "parameter `{}` of kernel `{}`: {what}",
                    param.name, param.kernel
                ),
            })
        };
        let record = self
            .kernels
            .get(param.index)
            .ok_or_else(|| refused("the graph has no such launch"))?;
        let (Some(node), Some(args)) = (record.node, record.args.as_ref()) else {
            return Err(refused("the launch's node or arguments are not known"));
        };
        let mut args = args.clone();
        let slot = args
            .get_mut(param.slot)
            .ok_or_else(|| refused("the launch has no such argument"))?;
        let bytes = value_bytes(&value);
        slot.0 = [0; 16];
        slot.0[..bytes.len()].copy_from_slice(bytes);
        let mut pointers: Vec<*mut c_void> = args
            .iter_mut()
            .map(|slot| slot.0.as_mut_ptr().cast::<c_void>())
            .collect();
        let launch = KernelNodeLaunch {
            function: &record.function,
            grid: record.config.grid,
            block: record.config.block,
            shared_bytes: record.config.shared_mem_bytes,
            args: &mut pointers,
        };
        // SAFETY: `node` is the kernel node this launch recorded, in `self.template`, the
        // live graph `self.exec` was instantiated from. The function is the kernel's,
        // loaded in this device's module cache, which keeps it loaded while the device
        // lives (`self.device`). The launch shape is the recorded one, checked at the
        // launch against the declaration and the device and function limits. The
        // arguments are the recorded ones (made by the `#[kernel]` wrapper and described
        // by its declaration) with the one scalar `param` names replaced by `value`, of
        // the type the declaration gives it (`KernelNode::scalar` checked its `TypeId`):
        // an argument list the declaration's safe wrapper accepts, for which the kernel
        // is memory-safe; every device address is unchanged, memory the graph owns
        // (valid in each replay) or holds for its whole life.
        unsafe { self.exec.set_kernel_node(node, launch) }?;
        if let Some(record) = self.kernels.get_mut(param.index) {
            record.args = Some(args);
        }
        Ok(())
    }
}
