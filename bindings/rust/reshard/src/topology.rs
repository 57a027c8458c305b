//! Topologies: which process, host and ordinal each device has.
use std::ptr;

use reshard_sys as sys;

use crate::error::{check, infallible, Result};

/// Maps devices to process rank, host (node) id and local ordinal
/// (`reshard_topology_t`). Devices never added are on process 0, host 0,
/// ordinal 0.
#[derive(Debug)]
pub struct Topology {
    raw: *mut sys::reshard_topology_t,
}

// SAFETY: reshard.h: builders "must not be modified by one thread while
// another uses them"; nothing is tied to the creating thread, so moving it is
// fine.
unsafe impl Send for Topology {}
// SAFETY: modification takes &mut self, so shared references only read,
// which reshard.h allows concurrently.
unsafe impl Sync for Topology {}

impl Topology {
    /// An empty topology.
    pub fn new() -> Result<Topology> {
        let mut raw = ptr::null_mut();
        // SAFETY: raw is a valid output.
        check(unsafe { sys::reshard_topology_create(&mut raw) })?;
        Ok(Topology { raw })
    }

    /// Records that `device` lives in `process` on `host` with local
    /// `ordinal` (CUDA device index). Adding a device again with the same
    /// values is a no-op.
    ///
    /// Errors: [`crate::ErrorCode::InvalidArgument`] (a negative value;
    /// different values for a device already added). The topology is then
    /// unchanged.
    pub fn add_device(&mut self, device: i64, process: i32, host: i32, ordinal: i32) -> Result<&mut Self> {
        // SAFETY: self.raw is a live topology, exclusively borrowed.
        check(unsafe { sys::reshard_topology_add_device(self.raw, device, process, host, ordinal) })?;
        Ok(self)
    }

    /// Number of devices added.
    pub fn num_devices(&self) -> usize {
        let mut count = 0;
        // SAFETY: self.raw is a live topology.
        infallible(unsafe { sys::reshard_topology_num_devices(self.raw, &mut count) }, "reshard_topology_num_devices");
        count
    }

    /// The raw handle, for calls into `reshard-sys`; valid while `self` lives.
    pub fn as_raw(&self) -> *const sys::reshard_topology_t {
        self.raw
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // SAFETY: owned, destroyed once.
        unsafe { sys::reshard_topology_destroy(self.raw) }
    }
}
