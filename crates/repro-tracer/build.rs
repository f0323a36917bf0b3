//! Builds the replacement vDSO (vdso/vdso.c) with the system C compiler into `$OUT_DIR/repro-vdso.so`,
//! which the supervisor embeds and maps into every new program image. Without a working compiler the
//! image is empty and the supervisor falls back to disabling the vDSO (still correct, slower clocks).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("repro-vdso.so");
    for f in ["vdso/vdso.c", "vdso/vdso.lds", "vdso/vdso.map"] {
        println!("cargo:rerun-if-changed={}", dir.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=CC");
    // Cargo always sets it; without it no vDSO is built, which the supervisor reports at run time.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let built = arch == "x86_64" && compile(&dir, &out);
    if !built {
        println!(
            "cargo:warning=repro-tracer: the replacement vDSO was not built; clock reads will be mediated syscalls"
        );
        std::fs::write(&out, b"").expect("writing an empty vDSO image");
    }
}

fn compile(dir: &std::path::Path, out: &std::path::Path) -> bool {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let lds = dir.join("vdso/vdso.lds");
    let map = dir.join("vdso/vdso.map");
    let status = Command::new(&cc)
        .args([
            "-O2",
            "-Wall",
            "-fPIC",
            "-fvisibility=hidden",
            "-fno-stack-protector",
            "-fno-builtin",
            "-ffreestanding",
            "-fcf-protection=none",
            "-nostdlib",
            "-shared",
            "-Wl,-soname=linux-vdso.so.1",
            "-Wl,--hash-style=both",
            "-Wl,-z,max-page-size=4096",
            "-Wl,-z,norelro",
            "-Wl,--no-undefined",
            "-Wl,-Bsymbolic",
            "-Wl,--build-id=none",
        ])
        .arg(format!("-Wl,-T,{}", lds.display()))
        .arg(format!("-Wl,--version-script={}", map.display()))
        .arg("-o")
        .arg(out)
        .arg(dir.join("vdso/vdso.c"))
        .status();
    match status {
        Ok(s) if s.success() => true,
        Ok(s) => {
            println!("cargo:warning=repro-tracer: {cc} failed on vdso/vdso.c ({s})");
            false
        }
        Err(e) => {
            println!("cargo:warning=repro-tracer: cannot run {cc}: {e}");
            false
        }
    }
}
