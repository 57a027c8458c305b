"""Turning the public C headers into cffi declarations.

Used twice: at build time by ``bindings/python/gen_cffi_decl.py``, which
writes the module ``reshard/_cffi_decl.py`` (cffi's out-of-line ABI mode:
the declarations pre-parsed, so ``import reshard`` runs no C parser), and at
import by ``reshard._ffi`` only when that module is missing (a source
checkout on ``PYTHONPATH``) or ``RESHARD_INCLUDE_DIR`` names other headers.
Imports nothing but the standard library.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Tuple

HEADERS = ("reshard.h", "reshard_mpi.h", "reshard_nccl.h")

# The subset of DLPack (dlpack.h, v1.0 and the legacy unversioned form) that
# reshard touches: numpy.from_dlpack reads the capsules; reshard only reads
# and rewrites the dtype of bf16/f8 exports, which NumPy refuses
# (reshard._core._Export). DLPack is a stable C ABI; these layouts never change.
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



def declarations(include_dir: Path) -> Tuple[str, Dict[str, int]]:
    """The cffi source for the headers under ``include_dir/reshard`` plus the
    DLPack structs, and the integer macros found in them."""
    macros: Dict[str, int] = {}
    parts = [header_to_cdef((include_dir / "reshard" / h).read_text(), macros) for h in HEADERS]
    return "\n".join(parts) + _DLPACK_CDEF, macros
