"""Loading libreshard through its C ABI only.

The declarations come from the public headers themselves (``reshard.h``,
``reshard_mpi.h``, ``reshard_nccl.h``): they are read at import time, the few
things cffi cannot parse (preprocessor lines, ``RESHARD_API``, the C++ guards)
are stripped, and integer macros are substituted. Every call then goes through
the function table that ``reshard_get_api(RESHARD_ABI_MAJOR)`` returns, the way
a framework that ``dlopen``s the library uses it; the table's ``struct_size``
and ABI version are checked before anything else.

Where things are looked up:

- the library: ``$RESHARD_LIBRARY`` (a path), else ``_lib/libreshard.so.1``
  inside this package (what ``pip install`` bundles);
- the headers: ``$RESHARD_INCLUDE_DIR`` (the directory holding ``reshard/``),
  else ``_include`` inside this package, else ``capi/include`` of the source
  tree this file sits in (a development checkout).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import cffi

HEADERS = ("reshard.h", "reshard_mpi.h", "reshard_nccl.h")

# The subset of DLPack (dlpack.h, v1.0 and the legacy unversioned form) that
# reshard reads. DLPack is itself a stable C ABI; these layouts never change.
_DLPACK_CDEF = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor; void* manager_ctx; void (*deleter)(struct DLManagedTensor*);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned*); uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
"""

_HERE = Path(__file__).resolve().parent


def _include_dir() -> Path:
    env = os.environ.get("RESHARD_INCLUDE_DIR")
    candidates = [Path(env)] if env else []
    candidates += [_HERE / "_include", _HERE.parents[3] / "capi" / "include"
                   if len(_HERE.parents) > 3 else _HERE / "_include"]
    for c in candidates:
        if (c / "reshard" / "reshard.h").is_file():
            return c
    raise ImportError("reshard: cannot find reshard/reshard.h (looked in "
                      + ", ".join(str(c) for c in candidates)
                      + "); set RESHARD_INCLUDE_DIR to the directory holding reshard/")


def _library_path() -> str:
    env = os.environ.get("RESHARD_LIBRARY")
    if env:
        return env
    bundled = _HERE / "_lib" / "libreshard.so.1"
    if bundled.exists():
        return str(bundled)
    raise ImportError(f"reshard: {bundled} not found and RESHARD_LIBRARY is not set: install the "
                      "package with `pip install ./bindings/python`, or point RESHARD_LIBRARY at "
                      "a built libreshard.so.1 (build/dev/capi/libreshard.so.1)")


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_INT = re.compile(r"^\(?\s*(-?\d+)\s*\)?[uUlL]*$")


def header_to_cdef(text: str, macros: Dict[str, int]) -> str:
    """Turns one public header into declarations cffi accepts.

    Removes comments, preprocessor lines and ``RESHARD_API``, drops what
    ``#ifdef __cplusplus`` guards, records ``#define NAME <integer>`` in
    ``macros`` and substitutes those names where they are used (array
    bounds). Any other construct is passed to cffi unchanged, so a header
    change cffi cannot read fails at import with cffi's message.
    """
    text = _COMMENT.sub(" ", text).replace("\\\n", " ")
    out: List[str] = []
    active: List[bool] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            d = s[1:].strip()
            if d.startswith(("ifdef", "ifndef", "if ")):
                active.append("__cplusplus" not in d)
            elif d.startswith("else") or d.startswith("elif"):
                if active and not active[-1] and "__cplusplus" in d:
                    active[-1] = True
            elif d.startswith("endif"):
                active.pop()
            elif d.startswith("define") and all(active):
                parts = d.split(None, 2)
                if len(parts) == 3:
                    m = _INT.match(parts[2].strip())
                    if m:
                        macros[parts[1]] = int(m.group(1))
            continue
        if all(active):
            out.append(line)
    body = "\n".join(out).replace("RESHARD_API", "")
    for name, value in macros.items():
        body = re.sub(r"\b%s\b" % re.escape(name), str(value), body)
    return body


def _build() -> Tuple[cffi.FFI, object, object, Dict[str, int], str]:
    ffi = cffi.FFI()
    inc = _include_dir() / "reshard"
    macros: Dict[str, int] = {}
    parts = [header_to_cdef((inc / h).read_text(), macros) for h in HEADERS]
    ffi.cdef("\n".join(parts) + _DLPACK_CDEF)
    path = _library_path()
    lib = ffi.dlopen(path)
    api = lib.reshard_get_api(macros["RESHARD_ABI_MAJOR"])
    if api == ffi.NULL:
        raise ImportError(f"reshard: {path} does not implement C ABI major "
                          f"{macros['RESHARD_ABI_MAJOR']} (reshard_get_api returned NULL)")
    if api.abi_major != macros["RESHARD_ABI_MAJOR"]:
        raise ImportError(f"reshard: {path} reports ABI {api.abi_major}.{api.abi_minor}, "
                          f"the headers {macros['RESHARD_ABI_MAJOR']}.{macros['RESHARD_ABI_MINOR']}")
    # Every field this package calls must be inside the library's table: the
    # last one it uses is plan_device_location (ABI 1.1).
    need = ffi.offsetof("reshard_api_t", "plan_device_location") + ffi.sizeof("void*")
    if api.struct_size < need or api.abi_minor < 1:
        raise ImportError(f"reshard: {path} has ABI {api.abi_major}.{api.abi_minor} with a "
                          f"{api.struct_size}-byte function table; this package needs ABI 1.1 or "
                          f"later ({need} bytes)")
    return ffi, lib, api, macros, path


ffi, lib, api, MACROS, LIBRARY_PATH = _build()
ABI_VERSION: Tuple[int, int] = (int(api.abi_major), int(api.abi_minor))
HEADER_ABI_VERSION: Tuple[int, int] = (MACROS["RESHARD_ABI_MAJOR"], MACROS["RESHARD_ABI_MINOR"])
NULL = ffi.NULL


def const(name: str) -> int:
    """The value of an enum constant or integer macro of the headers."""
    if name in MACROS:
        return MACROS[name]
    return int(getattr(lib, name))


# ----------------------------------------------------------------- errors
class ReshardError(Exception):
    """An error returned by libreshard: ``code`` (``RESHARD_ERROR_*``),
    ``code_name`` (``"invalid_argument"``, ...) and ``message`` (which starts
    with the argument or field at fault)."""

    code: int = -1

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"[{self.code_name}] {message}")

    @property
    def code_name(self) -> str:
        if self.code < 0:
            return "python"
        return ffi.string(api.error_code_name(self.code)).decode()


def _error_class(name: str, code_const: str, *bases: type) -> type:
    cls = type(name, (ReshardError,) + bases, {"code": const(code_const),
                                               "__doc__": f"{code_const} from libreshard."})
    return cls


InvalidArgumentError = _error_class("InvalidArgumentError", "RESHARD_ERROR_INVALID_ARGUMENT", ValueError)
OutOfRangeError = _error_class("OutOfRangeError", "RESHARD_ERROR_OUT_OF_RANGE", IndexError)
ReshardOverflowError = _error_class("ReshardOverflowError", "RESHARD_ERROR_OVERFLOW", OverflowError)
MismatchError = _error_class("MismatchError", "RESHARD_ERROR_MISMATCH", ValueError)
ParseError = _error_class("ParseError", "RESHARD_ERROR_PARSE", ValueError)
CorruptError = _error_class("CorruptError", "RESHARD_ERROR_CORRUPT", ValueError)
UnsupportedError = _error_class("UnsupportedError", "RESHARD_ERROR_UNSUPPORTED")
ReshardTimeoutError = _error_class("ReshardTimeoutError", "RESHARD_ERROR_TIMEOUT", TimeoutError)
TransportError = _error_class("TransportError", "RESHARD_ERROR_TRANSPORT")
ReshardMemoryError = _error_class("ReshardMemoryError", "RESHARD_ERROR_OUT_OF_MEMORY", MemoryError)
InternalError = _error_class("InternalError", "RESHARD_ERROR_INTERNAL")
ResourceExhaustedError = _error_class("ResourceExhaustedError", "RESHARD_ERROR_RESOURCE_EXHAUSTED")

ERROR_CLASSES: Dict[int, type] = {c.code: c for c in (
    InvalidArgumentError, OutOfRangeError, ReshardOverflowError, MismatchError, ParseError,
    CorruptError, UnsupportedError, ReshardTimeoutError, TransportError, ReshardMemoryError,
    InternalError, ResourceExhaustedError)}


def check(err) -> None:
    """Raises the exception for a non-NULL ``reshard_error_t*`` (and frees it)."""
    if err == NULL:
        return
    code = int(api.error_code(err))
    message = ffi.string(api.error_message(err)).decode("utf-8", "replace")
    api.error_destroy(err)
    raise ERROR_CLASSES.get(code, ReshardError)(message, code)
