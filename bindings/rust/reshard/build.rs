//! Generates the plan reader from schema/plan.fbs with `flatc --rust` into
//! OUT_DIR (docs/design.md §6: the schema is the single source of truth).
//!
//! `FLATC` names the compiler (default `flatc` on PATH); it must be a 2.0.x
//! release, whose generated code matches the `flatbuffers` 2.x runtime.
//! `RESHARD_PLAN_FBS` names the schema (default: the repository's
//! schema/plan.fbs next to this workspace).
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FLATC");
    println!("cargo:rerun-if-env-changed=RESHARD_PLAN_FBS");
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let schema =
        env::var_os("RESHARD_PLAN_FBS").map(PathBuf::from).unwrap_or_else(|| manifest.join("../../../schema/plan.fbs"));
    if !schema.exists() {
        panic!("reshard: schema {} not found; set RESHARD_PLAN_FBS to schema/plan.fbs", schema.display());
    }
    println!("cargo:rerun-if-changed={}", schema.display());

    let flatc = env::var("FLATC").unwrap_or_else(|_| "flatc".into());
    let version = Command::new(&flatc).arg("--version").output().unwrap_or_else(|e| {
        panic!(
            "reshard: cannot run `{flatc} --version` ({e}); install flatc 2.0.x \
                (Debian: flatbuffers-compiler) or set FLATC"
        )
    });
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !version.contains("version 2.") {
        panic!(
            "reshard: `{flatc}` reports `{version}`; the generated code needs flatc 2.0.x \
                to match the flatbuffers 2.x runtime (set FLATC)"
        );
    }

    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let status = Command::new(&flatc)
        .arg("--rust")
        .arg("-o")
        .arg(&out)
        .arg(&schema)
        .status()
        .unwrap_or_else(|e| panic!("reshard: running {flatc}: {e}"));
    assert!(status.success(), "reshard: {flatc} --rust {} failed", schema.display());
    assert!(out.join("plan_generated.rs").exists(), "flatc wrote no plan_generated.rs");
}
