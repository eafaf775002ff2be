//! The AFL++ harness: `hangar-fuzz-afl <target>`, built by `cargo afl build --features afl`
//! and run by `fuzz/run --long` under `cargo afl fuzz`. Each input goes to the target's
//! byte-level harness; a failed check panics, which AFL records as a crash.
fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = hangar_fuzz::target(&name) else {
        let names: Vec<&str> = hangar_fuzz::targets().iter().map(|t| t.name).collect();
        eprintln!("usage: hangar-fuzz-afl <target>; targets: {}", names.join(", "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
