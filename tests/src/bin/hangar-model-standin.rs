//! `hangar-model-standin`: the tests' scripted model (`hangar_e2e::model`) as a program, so it can
//! run in a container of its own (images/agent/build-standin) where a sandbox reaches it over a
//! Docker network, as it would reach a real model endpoint or a proxy.
//!
//!     hangar-model-standin [--listen ADDR] SCRIPT
//!
//! SCRIPT is a JSON array of steps (`Step::script_from_json`), or `@FILE` to read it from a
//! file. ADDR defaults to `0.0.0.0:8080`. It prints `listening on ADDR`, then one JSON line per
//! request it gets, once it is answered (`method`, `path`, `scripted`: whether it took a step;
//! `answer`: a model call's number, as the CLI's lines name it; `answered`: when the answer's
//! last bytes were sent, Unix seconds), and exits 0 on SIGTERM or SIGINT (as a container's PID 1
//! it would otherwise ignore them); 2 on a bad argument or script.
use std::{io::Write as _, net::SocketAddr, time::Duration};

use hangar_e2e::model::{Model, Step};
use serde_json::{json, Value};

fn usage(why: &str) -> ! {
    eprintln!("hangar-model-standin: {why}\nusage: hangar-model-standin [--listen ADDR] SCRIPT|@FILE");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listen = "0.0.0.0:8080".to_string();
    let mut script = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().unwrap_or_else(|| usage("--listen needs an address")),
            _ if script.is_none() => script = Some(a),
            _ => usage(&format!("unexpected argument {a:?}")),
        }
    }
    let script = script.unwrap_or_else(|| usage("no script"));
    let text = match script.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file).unwrap_or_else(|e| usage(&format!("reading {file}: {e}"))),
        None => script,
    };
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| usage(&format!("the script is not JSON: {e}")));
    let steps = Step::script_from_json(&value).unwrap_or_else(|e| usage(&e));
    let addr: SocketAddr = listen.parse().unwrap_or_else(|e| usage(&format!("--listen {listen:?}: {e}")));
    let model = Model::serve_on(addr, steps).unwrap_or_else(|e| usage(&format!("listening on {addr}: {e}")));
    println!("listening on {}", model.addr());

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut shown = 0;
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = tokio::signal::ctrl_c() => break,
                _ = tick.tick() => {
                    let requests = model.requests();
                    let mut out = std::io::stdout().lock();
                    // A request is printed once its answer is sent, with when (in order).
                    for r in requests.iter().skip(shown).take_while(|r| r.answered.is_some()) {
                        let line = json!({"method": r.method, "path": r.path, "scripted": r.scripted,
                            "answer": r.answer, "answered": r.answered});
                        let _ = writeln!(out, "{line}");
                        shown += 1;
                    }
                    let _ = out.flush();
                }
            }
        }
    });
}
