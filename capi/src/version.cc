// Run-time version of the library (the header's macros give compile time).
#include "internal.h"

static_assert(RESHARD_ABI_MAJOR == 1, "reshard_get_api and the SONAME assume ABI major 1");

extern "C" {

const char* reshard_version(void) { return RESHARD_VERSION_STRING; }

uint32_t reshard_version_number(void) { return RESHARD_VERSION_NUMBER; }

}  // extern "C"
