//! Executing plans on shard buffers.
use std::ptr;

use reshard_sys as sys;

use crate::dtype::{DType, Element};
use crate::error::{check, Error, ErrorCode, Result};
use crate::plan::Plan;

/// How an executor moves bytes (`reshard_transport_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(i32)]
pub enum Transport {
    /// In-process, host memory: one process owns every device.
    #[default]
    Host = sys::RESHARD_TRANSPORT_HOST,
    /// MPI (reserved: [`ErrorCode::Unsupported`] in this release).
    Mpi = sys::RESHARD_TRANSPORT_MPI,
    /// NCCL (reserved: [`ErrorCode::Unsupported`] in this release).
    Nccl = sys::RESHARD_TRANSPORT_NCCL,
}

/// Executor options (`reshard_executor_options_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecutorOptions {
    /// How bytes move.
    pub transport: Transport,
    /// Worker threads (>= 0); 0: one per hardware thread.
    pub threads: i32,
}

/// What [`Executor::verify`] found (`reshard_verify_report_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// Tensors checked.
    pub tensors: i64,
    /// Destination elements checked (replicas included).
    pub elements: i64,
    /// Destination bytes checked.
    pub bytes: i64,
    /// Wrong elements; 0 means the plan is correct.
    pub mismatches: i64,
}

/// The Rust element type of typed buffers: its name and [`Element::holds`].
type ElementCheck = (&'static str, fn(DType) -> bool);

/// The shard buffers of one tensor: one source buffer per source layout
/// entry and one destination buffer per destination entry, in entry order
/// (see [`Plan::entries`]). Each is dense, row-major, exactly its entry's
/// box. Borrowing rules make destinations distinct from each other and from
/// the sources.
pub struct TensorBuffers<'a> {
    src: Vec<&'a [u8]>,
    dst: Vec<&'a mut [u8]>,
    element: Option<ElementCheck>,
}

fn bytes_of<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: T is a sealed primitive (no padding, no invalid bit patterns
    // are read here), the length covers exactly the same memory, and the
    // lifetime is carried over.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

fn bytes_of_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as bytes_of; every bit pattern is a valid T (Element's
    // contract), so any bytes the library writes leave valid values.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}

impl<'a> TensorBuffers<'a> {
    /// Typed buffers: `T` must hold the tensor's dtype ([`Element::holds`]),
    /// checked at execution.
    pub fn new<T: Element>(src: Vec<&'a [T]>, dst: Vec<&'a mut [T]>) -> TensorBuffers<'a> {
        TensorBuffers {
            src: src.into_iter().map(bytes_of).collect(),
            dst: dst.into_iter().map(bytes_of_mut).collect(),
            element: Some((std::any::type_name::<T>(), T::holds)),
        }
    }

    /// Typed buffers borrowed from owned vectors.
    pub fn from_vecs<T: Element>(src: &'a [Vec<T>], dst: &'a mut [Vec<T>]) -> TensorBuffers<'a> {
        TensorBuffers::new(src.iter().map(Vec::as_slice).collect(), dst.iter_mut().map(Vec::as_mut_slice).collect())
    }

    /// Untyped buffers (any dtype, e.g. bf16 held as bytes). Each must be
    /// aligned to the dtype's size.
    pub fn from_bytes(src: Vec<&'a [u8]>, dst: Vec<&'a mut [u8]>) -> TensorBuffers<'a> {
        TensorBuffers { src, dst, element: None }
    }

    /// The destination buffers (to read results after execution).
    pub fn dst(&self) -> &[&'a mut [u8]] {
        &self.dst
    }
}

impl std::fmt::Debug for TensorBuffers<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sizes = |v: &mut dyn Iterator<Item = usize>| v.collect::<Vec<_>>();
        f.debug_struct("TensorBuffers")
            .field("element", &self.element.map(|(name, _)| name))
            .field("src_bytes", &sizes(&mut self.src.iter().map(|s| s.len())))
            .field("dst_bytes", &sizes(&mut self.dst.iter().map(|s| s.len())))
            .finish()
    }
}

/// Executes plans (`reshard_executor_t`). Immutable: one executor may run
/// several plans concurrently from several threads.
#[derive(Debug)]
pub struct Executor {
    raw: *mut sys::reshard_executor_t,
}

// SAFETY: reshard.h: executor handles are immutable; "one executor may run
// several plans concurrently from several threads when their destination
// buffers are distinct" — execute borrows destinations mutably, so they are.
unsafe impl Send for Executor {}
// SAFETY: as above.
unsafe impl Sync for Executor {}

impl Executor {
    /// A host (in-process) executor with one thread per hardware thread.
    pub fn new() -> Result<Executor> {
        Executor::with_options(ExecutorOptions::default())
    }

    /// An executor with `options`.
    ///
    /// Errors: [`ErrorCode::InvalidArgument`] (negative threads),
    /// [`ErrorCode::Unsupported`] (a transport not in this build).
    pub fn with_options(options: ExecutorOptions) -> Result<Executor> {
        let raw_options = sys::reshard_executor_options_t {
            transport: options.transport as i32,
            threads: options.threads,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: complete options; valid output.
        check(unsafe { sys::reshard_executor_create(&raw_options, &mut raw) })?;
        Ok(Executor { raw })
    }

    /// Fills every destination buffer of every tensor of `plan` (which must
    /// hold every process part) from the source buffers; `buffers` has one
    /// element per plan tensor. Every count, size, alignment and element
    /// type and alignment are checked here, counts and sizes by the library,
    /// before anything is written; on error nothing is written.
    ///
    /// Errors: [`ErrorCode::InvalidArgument`] naming the buffer
    /// (`buffers[1].dst[3]: 96 bytes given, box [0:4, 0:8) of f32 needs
    /// 128`; `plan: lacks the part of process 1`), [`ErrorCode::Mismatch`]
    /// (element type).
    pub fn execute(&self, plan: &Plan, buffers: &mut [TensorBuffers<'_>]) -> Result<()> {
        let num_tensors = plan.num_tensors();
        if buffers.len() != num_tensors {
            return Err(Error::invalid(format!(
                "buffers: {} tensors given, the plan has {num_tensors}",
                buffers.len()
            )));
        }
        let mut src_all = Vec::with_capacity(num_tensors);
        let mut dst_all = Vec::with_capacity(num_tensors);
        for (t, b) in buffers.iter_mut().enumerate() {
            let info = plan.tensor(t)?;
            let (dtype, dst_dtype) = (info.dtype, info.dst_dtype);
            if let Some((name, holds)) = b.element {
                if !holds(dtype) {
                    return Err(Error::new(
                        ErrorCode::Mismatch,
                        format!("buffers[{t}]: {name} elements cannot hold tensor {t} of dtype {dtype}"),
                    ));
                }
                if !holds(dst_dtype) {
                    return Err(Error::new(
                        ErrorCode::Mismatch,
                        format!(
                            "buffers[{t}]: {name} elements cannot hold tensor {t}'s destination dtype \
                             {dst_dtype} (cast from {dtype}; TensorBuffers::from_bytes takes each side in its own dtype)"
                        ),
                    ));
                }
            }
            check_alignment(t, "src", dtype, b.src.iter().map(|s| (s.as_ptr() as usize, s.len())))?;
            check_alignment(t, "dst", dst_dtype, b.dst.iter().map(|s| (s.as_ptr() as usize, s.len())))?;
            src_all.push(
                b.src
                    .iter()
                    .map(|s| sys::reshard_src_buffer_t { data: s.as_ptr().cast(), bytes: s.len() })
                    .collect::<Vec<_>>(),
            );
            dst_all.push(
                b.dst
                    .iter_mut()
                    .map(|s| sys::reshard_dst_buffer_t { data: s.as_mut_ptr().cast(), bytes: s.len() })
                    .collect::<Vec<_>>(),
            );
        }
        let tensors: Vec<sys::reshard_tensor_buffers_t> = src_all
            .iter()
            .zip(&dst_all)
            .map(|(s, d)| sys::reshard_tensor_buffers_t {
                src: s.as_ptr(),
                num_src: s.len(),
                dst: d.as_ptr(),
                num_dst: d.len(),
            })
            .collect();
        // SAFETY: live handles; every descriptor points into a slice borrowed
        // for this call (destinations exclusively) with the size the plan
        // expects; the library keeps no pointer after returning.
        check(unsafe { sys::reshard_executor_execute(self.raw, plan.as_raw(), tensors.as_ptr(), tensors.len()) })
    }

    /// What `reshard verify` does: allocates every shard of `plan`, fills the
    /// sources with the oracle's values, executes, and checks every
    /// destination element. A wrong element is counted, not an error.
    pub fn verify(&self, plan: &Plan) -> Result<VerifyReport> {
        let mut r = sys::reshard_verify_report_t::default();
        // SAFETY: live handles; struct_size set.
        check(unsafe { sys::reshard_executor_verify(self.raw, plan.as_raw(), &mut r) })?;
        Ok(VerifyReport { tensors: r.tensors, elements: r.elements, bytes: r.bytes, mismatches: r.mismatches })
    }

    /// The raw handle, for calls into `reshard-sys`; valid while `self` lives.
    pub fn as_raw(&self) -> *const sys::reshard_executor_t {
        self.raw
    }
}

// What only this crate can check: alignment of the element type to the
// buffer's address (counts and sizes are the library's to check, once).
fn check_alignment(tensor: usize, what: &str, dtype: DType, given: impl Iterator<Item = (usize, usize)>) -> Result<()> {
    for (e, (addr, len)) in given.enumerate() {
        if len > 0 && addr % dtype.size() != 0 {
            return Err(Error::invalid(format!(
                "buffers[{tensor}].{what}[{e}]: data not aligned to {} bytes",
                dtype.size()
            )));
        }
    }
    Ok(())
}

impl Drop for Executor {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::reshard_executor_destroy(self.raw) }
    }
}
