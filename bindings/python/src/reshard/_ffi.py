"""Loading libreshard through its C ABI only.

The declarations come from the public headers themselves (``reshard.h``,
``reshard_mpi.h``, ``reshard_nccl.h``; ``reshard._cdef`` strips what cffi
cannot parse and substitutes integer macros). An installed package has them
pre-parsed in ``_cffi_decl``, which the build generates (cffi's out-of-line
ABI mode), so an import parses no C; a source checkout parses the headers at
import. Every call then goes through
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
from pathlib import Path
import importlib
from typing import Any, Dict, Optional, Tuple, Type

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


def _declarations() -> Tuple[Any, Dict[str, int]]:
    """The FFI with every declaration, and the headers' integer macros:
    generated at build time (``_cffi_decl``), else parsed from the headers."""
    if not os.environ.get("RESHARD_INCLUDE_DIR"):
        try:
            # Written by bindings/python/gen_cffi_decl.py at build time.
            decl = importlib.import_module(f"{__package__}._cffi_decl")
            return decl.ffi, dict(decl.MACROS)
        except ImportError:
            pass
    import cffi

    from ._cdef import declarations
    source, macros = declarations(_include_dir())
    ffi = cffi.FFI()
    ffi.cdef(source)
    return ffi, macros


def _build() -> Tuple[Any, Any, Any, Dict[str, int], str]:
    ffi, macros = _declarations()
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


def _error_class(name: str, code_const: str, *bases: type) -> Type[ReshardError]:
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

ERROR_CLASSES: Dict[int, Type[ReshardError]] = {c.code: c for c in (
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
