//! Device meshes.
use std::ptr;

use reshard_sys as sys;

use crate::error::{check, infallible, Error, ErrorCode, Result};
use crate::util::{ptr_or_null, CStrings};

/// An N-d array of distinct devices with named axes (`reshard_mesh_t`).
/// Immutable; layouts made from it stay valid after it is dropped.
#[derive(Debug)]
pub struct Mesh {
    raw: *mut sys::reshard_mesh_t,
}

// SAFETY: reshard.h: "Mesh, layout, plan and executor handles are immutable
// after creation: any number of threads may use them concurrently", and no
// call depends on the creating thread.
unsafe impl Send for Mesh {}
// SAFETY: as above; every method takes &self and only reads the mesh.
unsafe impl Sync for Mesh {}

impl Mesh {
    /// A mesh with axes `axis_names` of sizes `shape` (>= 1 each) over
    /// `devices` (row-major, distinct, non-negative; `None` for 0..N-1).
    /// An empty `axis_names` makes a one-device mesh.
    ///
    /// Errors: [`ErrorCode::InvalidArgument`] naming the field (a duplicate
    /// or empty axis name, a bad size, a repeated device, `devices` of the
    /// wrong length), [`ErrorCode::Overflow`].
    pub fn new<S: AsRef<str>>(axis_names: &[S], shape: &[i64], devices: Option<&[i64]>) -> Result<Mesh> {
        if axis_names.len() != shape.len() {
            return Err(Error::invalid(format!(
                "shape: {} sizes given for {} axis names",
                shape.len(),
                axis_names.len()
            )));
        }
        let names = CStrings::new(axis_names, "axis_names")?;
        // The library reads product(shape) device ids: only hand it a slice
        // of exactly that length. With an invalid shape it reports the shape
        // (devices are then not passed, so nothing past the slice is read).
        let mut devices_ptr = ptr::null();
        if let Some(devices) = devices {
            if shape.iter().all(|&s| s >= 1) {
                let count = shape
                    .iter()
                    .try_fold(1i64, |acc, &s| acc.checked_mul(s))
                    .ok_or_else(|| Error::new(ErrorCode::Overflow, "shape: device count overflows"))?;
                if count != devices.len() as i64 {
                    return Err(Error::invalid(format!(
                        "devices: {} ids given, the mesh has {count} devices",
                        devices.len()
                    )));
                }
                devices_ptr = ptr_or_null(devices);
            }
        }
        let mut raw = ptr::null_mut();
        // SAFETY: names and shape hold shape.len() values; devices_ptr is
        // NULL or product(shape) values; raw is a valid output.
        check(unsafe {
            sys::reshard_mesh_create(shape.len(), names.as_ptr(), ptr_or_null(shape), devices_ptr, &mut raw)
        })?;
        Ok(Mesh { raw })
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        let mut rank = 0;
        // SAFETY: self.raw is a live mesh.
        infallible(unsafe { sys::reshard_mesh_rank(self.raw, &mut rank) }, "reshard_mesh_rank");
        rank
    }

    /// Number of devices.
    pub fn size(&self) -> i64 {
        let mut size = 0;
        // SAFETY: self.raw is a live mesh.
        infallible(unsafe { sys::reshard_mesh_size(self.raw, &mut size) }, "reshard_mesh_size");
        size
    }

    /// The raw handle, for calls into `reshard-sys`; valid while `self` lives.
    pub fn as_raw(&self) -> *const sys::reshard_mesh_t {
        self.raw
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        // SAFETY: self.raw is owned and destroyed exactly once.
        unsafe { sys::reshard_mesh_destroy(self.raw) }
    }
}
