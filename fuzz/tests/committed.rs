//! Under `cargo test`: every committed input (corpus seeds and the inputs of past failures)
//! passes its harness, and every property holds for a few cases. Fast (well under a second);
//! `fuzz/run` is where the fuzzing happens.
use std::path::Path;

fn inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| (e.path().display().to_string(), std::fs::read(e.path()).unwrap_or_default()))
        .collect();
    out.sort();
    out
}

#[test]
fn every_committed_input_passes_its_harness() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for t in hangar_fuzz::targets() {
        let corpus = inputs(&root.join("corpus").join(t.name));
        assert!(!corpus.is_empty(), "{} has corpus seeds", t.name);
        for (path, data) in corpus.iter().chain(&inputs(&root.join("regressions").join(t.name))) {
            let ok = std::panic::catch_unwind(|| (t.run)(data)).is_ok();
            assert!(ok, "{path} fails {}", t.name);
            seen += 1;
        }
    }
    assert!(seen > 0);
}

#[test]
fn every_property_holds_for_a_few_cases() {
    for t in hangar_fuzz::targets() {
        let mut runs = hangar_fuzz::Runs::new(16, 7);
        if let Err(f) = (t.props)(&mut runs) {
            panic!("{}: {}", t.name, f.reason);
        }
        assert!(runs.properties > 0, "{} has properties", t.name);
    }
}

#[test]
fn every_corpus_directory_names_a_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["corpus", "regressions"] {
        for e in std::fs::read_dir(root.join(dir)).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(hangar_fuzz::target(&name).is_some(), "{dir}/{name} is no target");
        }
    }
}
