//! [`KernelParam`]: a declared kernel's parameters, as `#[kernel]` describes them, so
//! that a graph can change a kernel node's scalar arguments in place (see
//! [`Graph::set_scalar`](crate::Graph::set_scalar)) knowing which CUDA parameters are
//! values of which type and which are a slice's pointer and length.

use std::any::TypeId;

use crate::memory::DeviceRepr;

/// One parameter of a `#[kernel]` declaration, in order. Made by the macro.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelParam {
    /// A value of a [`DeviceRepr`] type: one CUDA parameter of `size` bytes.
    Scalar {
        /// The parameter's name in the declaration.
        name: &'static str,
        /// The type, as written in the declaration (for messages).
        type_name: &'static str,
        /// `TypeId` of the type.
        type_id: TypeId,
        /// `size_of` the type.
        size: usize,
    },
    /// `&[T]` or `&mut [T]`: two CUDA parameters, a pointer and a `size_t` length.
    Slice {
        /// The parameter's name in the declaration.
        name: &'static str,
    },
}

impl KernelParam {
    /// A scalar parameter `name` of type `T` (written `type_name` in the declaration).
    pub const fn scalar<T: DeviceRepr>(name: &'static str, type_name: &'static str) -> Self {
        KernelParam::Scalar {
            name,
            type_name,
            type_id: TypeId::of::<T>(),
            size: std::mem::size_of::<T>(),
        }
    }

    /// A slice parameter `name`.
    pub const fn slice(name: &'static str) -> Self {
        KernelParam::Slice { name }
    }

    /// The parameter's name in the declaration.
    pub fn name(&self) -> &'static str {
        match self {
            KernelParam::Scalar { name, .. } | KernelParam::Slice { name } => name,
        }
    }

    /// How many CUDA parameters it is (a slice is a pointer and a length).
    pub(crate) fn cuda_count(&self) -> usize {
        match self {
            KernelParam::Scalar { .. } => 1,
            KernelParam::Slice { .. } => 2,
        }
    }

    /// The size in bytes of its `index`-th CUDA parameter (a slice's pointer and length
    /// are both 64-bit).
    pub(crate) fn cuda_size(&self) -> usize {
        match self {
            KernelParam::Scalar { size, .. } => *size,
            KernelParam::Slice { .. } => std::mem::size_of::<u64>(),
        }
    }
}
