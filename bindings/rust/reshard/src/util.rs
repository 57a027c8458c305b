//! Small helpers shared by the wrappers.
use std::ffi::CString;

use crate::error::{Error, Result};

/// A C string for `what`, rejecting interior NUL bytes with a message
/// naming the argument.
pub(crate) fn c_string(value: &str, what: &str) -> Result<CString> {
    CString::new(value).map_err(|_| Error::invalid(format!("{what}: contains a NUL byte")))
}

/// Several C strings and an array of pointers to them (kept together so the
/// pointers stay valid as long as the strings).
pub(crate) struct CStrings {
    _owned: Vec<CString>,
    pub(crate) ptrs: Vec<*const std::os::raw::c_char>,
}

impl CStrings {
    pub(crate) fn new<S: AsRef<str>>(values: &[S], what: &str) -> Result<CStrings> {
        let owned = values
            .iter()
            .enumerate()
            .map(|(i, v)| c_string(v.as_ref(), &format!("{what}[{i}]")))
            .collect::<Result<Vec<_>>>()?;
        let ptrs = owned.iter().map(|c| c.as_ptr()).collect();
        Ok(CStrings { _owned: owned, ptrs })
    }

    /// The pointer array, or NULL when empty.
    pub(crate) fn as_ptr(&self) -> *const *const std::os::raw::c_char {
        if self.ptrs.is_empty() {
            std::ptr::null()
        } else {
            self.ptrs.as_ptr()
        }
    }
}

/// A slice's pointer, or NULL when it is empty (the C ABI allows NULL for
/// empty arrays and some checks prefer it).
pub(crate) fn ptr_or_null<T>(values: &[T]) -> *const T {
    if values.is_empty() {
        std::ptr::null()
    } else {
        values.as_ptr()
    }
}
