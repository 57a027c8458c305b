//! Finds libreshard for the linker, in this order:
//!
//! 1. `RESHARD_LIB_DIR`: the directory holding `libreshard.so` (a build tree's
//!    `capi/` or an install's `lib/`). `RESHARD_INCLUDE_DIR` optionally names
//!    the directory holding `reshard/reshard.h` (used only by the layout test).
//! 2. `pkg-config reshard` (the `reshard.pc` that `cmake --install` writes;
//!    set `PKG_CONFIG_PATH` for a non-system prefix). The `pkg-config` binary
//!    is run directly, so no build dependency is needed.
//!
//! Dependents see the include directory as `DEP_RESHARD_INCLUDE` (`links`).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in [
        "RESHARD_LIB_DIR",
        "RESHARD_INCLUDE_DIR",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");

    let (lib_dirs, include_dir) = if let Some(dir) = env::var_os("RESHARD_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !dir.join("libreshard.so").exists() && !dir.join("libreshard.dylib").exists() {
            println!("cargo:warning=RESHARD_LIB_DIR={} holds no libreshard.so; linking may fail", dir.display());
        }
        let include = env::var_os("RESHARD_INCLUDE_DIR").map(PathBuf::from).or_else(|| guess_include(&dir));
        (vec![dir], include)
    } else {
        match pkg_config() {
            Ok(found) => found,
            Err(why) => panic!(
                "reshard-sys: cannot find libreshard. Set RESHARD_LIB_DIR to the directory \
                 holding libreshard.so (e.g. <build>/capi or <prefix>/lib), or make \
                 `pkg-config reshard` work (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig). \
                 pkg-config: {why}"
            ),
        }
    };
    for dir in &lib_dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    println!("cargo:rustc-link-lib=dylib=reshard");
    let include = env::var_os("RESHARD_INCLUDE_DIR").map(PathBuf::from).or(include_dir);
    if let Some(include) = include {
        println!("cargo:include={}", include.display());
        println!("cargo:rustc-env=RESHARD_SYS_INCLUDE_DIR={}", include.display());
    }
}

/// `<dir>/../include` for an install prefix; the source tree's
/// `capi/include` for a build tree.
fn guess_include(lib_dir: &Path) -> Option<PathBuf> {
    let candidates = [lib_dir.join("../include"), Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../capi/include")];
    candidates.into_iter().find(|c| c.join("reshard/reshard.h").exists())
}

fn pkg_config() -> Result<(Vec<PathBuf>, Option<PathBuf>), String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let output = Command::new(&program)
        .args(["--libs", "--cflags", "reshard"])
        .output()
        .map_err(|e| format!("running {program}: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
    }
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let mut lib_dirs = Vec::new();
    let mut include = None;
    for token in text.split_whitespace() {
        if let Some(dir) = token.strip_prefix("-L") {
            lib_dirs.push(PathBuf::from(dir));
        } else if let Some(dir) = token.strip_prefix("-I") {
            if include.is_none() && Path::new(dir).join("reshard/reshard.h").exists() {
                include = Some(PathBuf::from(dir));
            }
        }
    }
    Ok((lib_dirs, include))
}
