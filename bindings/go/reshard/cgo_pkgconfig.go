//go:build !reshard_no_pkgconfig

package reshard

// By default cgo finds libreshard with pkg-config (the reshard.pc that
// `cmake --install` writes; set PKG_CONFIG_PATH for a non-system prefix).
// Build with `-tags reshard_no_pkgconfig` to take the flags from
// CGO_CFLAGS / CGO_LDFLAGS instead (see README.md).

// #cgo pkg-config: reshard
import "C"
