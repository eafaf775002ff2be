//! The fuzz targets without AFL: `props` runs the proptest properties (a fixed number of cases
//! per property, from a seed), `replay` runs saved inputs (the committed corpus, AFL's crashes)
//! through the byte-level harnesses, `list` names the targets. A failing property's input is
//! written where `--save` says, so `replay` reproduces it.
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::{Arc, Mutex},
    time::Instant,
};

const USAGE: &str = "usage:
  hangar-fuzz list
  hangar-fuzz props [--cases N] [--seed N] [--save DIR] [TARGET...]
  hangar-fuzz replay TARGET PATH...   (files, or directories of files)
  hangar-fuzz seeds DIR [--cases N]  (N generated inputs per property into DIR/<target>/)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("list") => {
            for t in hangar_fuzz::targets() {
                println!("{:<16} {}", t.name, t.about.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            Ok(())
        }
        Some("props") => props(&args[1..]),
        Some("replay") => replay(&args[1..]),
        Some("seeds") => seeds(&args[1..]),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn targets(names: &[String]) -> Result<Vec<&'static hangar_fuzz::Target>, String> {
    if names.is_empty() {
        return Ok(hangar_fuzz::targets().iter().collect());
    }
    names.iter().map(|n| hangar_fuzz::target(n).ok_or_else(|| format!("no target {n:?}\n{USAGE}"))).collect()
}

/// The message of the last panic, kept by a quiet hook: proptest catches a failed check's
/// panic (and those of every shrinking step), and the default hook would print each one.
fn quiet_panics() -> Arc<Mutex<String>> {
    let last = Arc::new(Mutex::new(String::new()));
    let keep = last.clone();
    std::panic::set_hook(Box::new(move |info| {
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        *keep.lock().unwrap_or_else(|p| p.into_inner()) = format!("{info}{at}");
    }));
    last
}

fn props(args: &[String]) -> Result<(), String> {
    let (mut cases, mut seed, mut save, mut names) = (256u32, 0u64, None::<PathBuf>, Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().cloned().ok_or_else(|| format!("{a} needs {what}\n{USAGE}"));
        match a.as_str() {
            "--cases" => cases = value("a number")?.parse().map_err(|e| format!("--cases: {e}"))?,
            "--seed" => seed = value("a number")?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--save" => save = Some(PathBuf::from(value("a directory")?)),
            _ => names.push(a.clone()),
        }
    }
    let _ = quiet_panics();
    let mut failed = Vec::new();
    for t in targets(&names)? {
        let mut runs = hangar_fuzz::Runs::new(cases, seed);
        let start = Instant::now();
        match (t.props)(&mut runs) {
            Ok(()) => println!(
                "{:<16} ok      {} properties x {cases} cases in {:.1?}",
                t.name,
                runs.properties,
                start.elapsed()
            ),
            Err(f) => {
                println!("{:<16} FAILED  after {:.1?}: {}", t.name, start.elapsed(), f.reason);
                if let Some(dir) = &save {
                    let path =
                        write_case(dir, t.name, "prop", &f.input).map_err(|e| format!("saving the input: {e}"))?;
                    println!(
                        "{:<16}         input saved: {} (hangar-fuzz replay {} {})",
                        "",
                        path.display(),
                        t.name,
                        path.display()
                    );
                }
                failed.push(t.name);
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("properties failed: {}", failed.join(", ")))
    }
}

fn write_case(dir: &Path, target: &str, prefix: &str, input: &[u8]) -> std::io::Result<PathBuf> {
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir)?;
    // A content hash (FNV-1a) names it: the same failure saved twice is one file.
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    let path = dir.join(format!("{prefix}-{hash:016x}"));
    std::fs::write(&path, input)?;
    Ok(path)
}

fn files(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        entries.sort();
        for e in entries {
            if e.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.') || n == "README.txt") {
                continue;
            }
            files(&e, out)?;
        }
    } else {
        out.push(path.to_path_buf());
    }
    Ok(())
}

fn replay(args: &[String]) -> Result<(), String> {
    let Some((name, paths)) = args.split_first() else { return Err(USAGE.to_string()) };
    let [t] = targets(std::slice::from_ref(name))?[..] else { return Err(USAGE.to_string()) };
    let mut inputs = Vec::new();
    for p in paths {
        files(Path::new(p), &mut inputs).map_err(|e| format!("{p}: {e}"))?;
    }
    let last = quiet_panics();
    let start = Instant::now();
    let mut failed = 0;
    for path in &inputs {
        let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if std::panic::catch_unwind(|| (t.run)(&data)).is_err() {
            failed += 1;
            println!("{:<16} FAILED  {}: {}", t.name, path.display(), last.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }
    println!("{:<16} replayed {} inputs in {:.1?}, {failed} failed", t.name, inputs.len(), start.elapsed());
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} inputs of {} failed", t.name))
    }
}

/// Writes generated inputs of every property as corpus seeds, named by their content.
fn seeds(args: &[String]) -> Result<(), String> {
    let (dir, cases) = match args {
        [dir] => (dir, 4),
        [dir, flag, n] if flag == "--cases" => (dir, n.parse().map_err(|e| format!("--cases: {e}"))?),
        _ => return Err(USAGE.to_string()),
    };
    for t in hangar_fuzz::targets() {
        let mut runs = hangar_fuzz::Runs::new(cases, 0);
        runs.samples = Some(Vec::new());
        (t.props)(&mut runs).map_err(|f| f.reason)?;
        let samples = runs.samples.unwrap_or_default();
        for s in &samples {
            write_case(Path::new(dir), t.name, "gen", s).map_err(|e| format!("{dir}: {e}"))?;
        }
        println!("{:<16} {} seeds", t.name, samples.len());
    }
    Ok(())
}
