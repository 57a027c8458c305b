//! Errors: a code and a message, as the C ABI reports them.
use std::ffi::CStr;
use std::fmt;

use reshard_sys as sys;

/// What kind of failure an [`Error`] is. The values are those of
/// `reshard_error_code_t` (and of the C++ `reshard::ErrorCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A value is malformed.
    InvalidArgument,
    /// An index or size is out of range.
    OutOfRange,
    /// An element or byte count overflows.
    Overflow,
    /// Two inputs disagree.
    Mismatch,
    /// Spec text is not valid JSON or does not follow the schema.
    Parse,
    /// Plan bytes fail verification.
    Corrupt,
    /// Not available in this build.
    Unsupported,
    /// A wait ran past its deadline.
    Timeout,
    /// MPI, NCCL or CUDA reported an error.
    Transport,
    /// Allocation failed.
    OutOfMemory,
    /// A bug in reshard.
    Internal,
    /// A request whose estimated cost is above a limit
    /// ([`PlanRequest::max_plan_bytes`](crate::PlanRequest::max_plan_bytes)),
    /// refused before the work starts; the message gives the estimate.
    ResourceExhausted,
    /// A code this version of the crate does not know (from a newer library).
    Other(i32),
}

impl ErrorCode {
    /// The code for a raw `reshard_error_code_t` value.
    pub fn from_raw(code: i32) -> ErrorCode {
        match code {
            sys::RESHARD_ERROR_INVALID_ARGUMENT => ErrorCode::InvalidArgument,
            sys::RESHARD_ERROR_OUT_OF_RANGE => ErrorCode::OutOfRange,
            sys::RESHARD_ERROR_OVERFLOW => ErrorCode::Overflow,
            sys::RESHARD_ERROR_MISMATCH => ErrorCode::Mismatch,
            sys::RESHARD_ERROR_PARSE => ErrorCode::Parse,
            sys::RESHARD_ERROR_CORRUPT => ErrorCode::Corrupt,
            sys::RESHARD_ERROR_UNSUPPORTED => ErrorCode::Unsupported,
            sys::RESHARD_ERROR_TIMEOUT => ErrorCode::Timeout,
            sys::RESHARD_ERROR_TRANSPORT => ErrorCode::Transport,
            sys::RESHARD_ERROR_OUT_OF_MEMORY => ErrorCode::OutOfMemory,
            sys::RESHARD_ERROR_INTERNAL => ErrorCode::Internal,
            sys::RESHARD_ERROR_RESOURCE_EXHAUSTED => ErrorCode::ResourceExhausted,
            other => ErrorCode::Other(other),
        }
    }

    /// The raw `reshard_error_code_t` value.
    pub fn raw(self) -> i32 {
        match self {
            ErrorCode::InvalidArgument => sys::RESHARD_ERROR_INVALID_ARGUMENT,
            ErrorCode::OutOfRange => sys::RESHARD_ERROR_OUT_OF_RANGE,
            ErrorCode::Overflow => sys::RESHARD_ERROR_OVERFLOW,
            ErrorCode::Mismatch => sys::RESHARD_ERROR_MISMATCH,
            ErrorCode::Parse => sys::RESHARD_ERROR_PARSE,
            ErrorCode::Corrupt => sys::RESHARD_ERROR_CORRUPT,
            ErrorCode::Unsupported => sys::RESHARD_ERROR_UNSUPPORTED,
            ErrorCode::Timeout => sys::RESHARD_ERROR_TIMEOUT,
            ErrorCode::Transport => sys::RESHARD_ERROR_TRANSPORT,
            ErrorCode::OutOfMemory => sys::RESHARD_ERROR_OUT_OF_MEMORY,
            ErrorCode::Internal => sys::RESHARD_ERROR_INTERNAL,
            ErrorCode::ResourceExhausted => sys::RESHARD_ERROR_RESOURCE_EXHAUSTED,
            ErrorCode::Other(code) => code,
        }
    }

    /// The library's lower-case name of the code (`"invalid_argument"`,
    /// `"corrupt"`, ...; `"unknown"` for codes it does not know).
    pub fn name(self) -> &'static str {
        // SAFETY: reshard_error_code_name accepts any value and returns a
        // static NUL-terminated string.
        let name = unsafe { CStr::from_ptr(sys::reshard_error_code_name(self.raw())) };
        name.to_str().unwrap_or("unknown")
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error from reshard: its [`ErrorCode`] and a message that starts with
/// the argument or field at fault (`"mesh.axis_names[1]: duplicate axis
/// name"`). Errors found by this crate before calling the library (a buffer
/// of the wrong size, a string with a NUL byte) use the same form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    message: String,
}

impl Error {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }

    /// What kind of failure this is.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message, naming the argument or field at fault.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::InvalidArgument, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Turns a `reshard_error_t*` into a `Result`, taking ownership of (and
/// destroying) the error object.
pub(crate) fn check(status: *mut sys::reshard_error_t) -> Result<()> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: a non-NULL status is an error object the caller owns; its
    // message is valid until reshard_error_destroy, which runs after the copy.
    unsafe {
        let code = ErrorCode::from_raw(sys::reshard_error_code(status));
        let message = CStr::from_ptr(sys::reshard_error_message(status)).to_string_lossy().into_owned();
        sys::reshard_error_destroy(status);
        Err(Error { code, message })
    }
}

/// For calls that fail only on arguments this crate never passes (NULL
/// handles or outputs): an error there is a bug, reported loudly.
pub(crate) fn infallible(status: *mut sys::reshard_error_t, what: &str) {
    if let Err(e) = check(status) {
        panic!("reshard: {what} failed unexpectedly: {e}");
    }
}
