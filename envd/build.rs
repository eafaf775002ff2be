//! Links the daemon with the code layout scripts/build-envd writes (scripts/envd-layout): when
//! `HANGAR_ENVD_LAYOUT` names a linker script, the binary links with it, and cargo relinks when
//! the script changes. Unset (every build but the shipped one), nothing changes.
fn main() {
    println!("cargo:rerun-if-env-changed=HANGAR_ENVD_LAYOUT");
    if let Some(path) = std::env::var_os("HANGAR_ENVD_LAYOUT") {
        let Some(path) = path.to_str() else {
            panic!("HANGAR_ENVD_LAYOUT is not UTF-8: {path:?}");
        };
        println!("cargo:rerun-if-changed={path}");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{path}");
    }
}
