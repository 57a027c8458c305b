"""Build step (CMakeLists.txt): writes reshard/_cffi_decl.py, the cffi
declarations of the public headers pre-parsed in cffi's out-of-line ABI
mode, so that ``import reshard`` parses no C (the headers went through
pycparser on every import before: 0.1-0.2 s).

    python gen_cffi_decl.py INCLUDE_DIR OUTPUT

INCLUDE_DIR holds reshard/reshard.h; OUTPUT is the module to write. The
module defines ``ffi`` (load the library with ``ffi.dlopen``) and ``MACROS``
(the headers' integer macros).
"""
import importlib.util
import sys
from pathlib import Path

import cffi


def main() -> None:
    include_dir, output = Path(sys.argv[1]), Path(sys.argv[2])
    # reshard/_cdef.py by path: importing the package would load the library.
    spec = importlib.util.spec_from_file_location(
        "reshard_cdef", Path(__file__).resolve().parent / "src" / "reshard" / "_cdef.py")
    assert spec is not None and spec.loader is not None
    cdef = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cdef)
    source, macros = cdef.declarations(include_dir)
    ffi = cffi.FFI()
    ffi.cdef(source)
    ffi.set_source("reshard._cffi_decl", None)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".tmp")
    ffi.emit_python_code(str(tmp))
    with open(tmp, "a") as f:
        f.write("\n# The integer macros of the headers (RESHARD_ABI_MAJOR, ...).\n")
        f.write("MACROS = %r\n" % dict(sorted(macros.items())))
    tmp.replace(output)


if __name__ == "__main__":
    main()
