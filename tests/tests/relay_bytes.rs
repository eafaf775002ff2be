//! Output that is not UTF-8: the text forms replace it (U+FFFD), and `encoding=base64` gives the
//! exact bytes, on a process's read and stream alike, with byte offsets that resume exactly.
use base64::Engine as _;
use hangar_e2e::{
    relay::{Relay, StateDir, ADMIN},
    STEP,
};
use serde_json::json;

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_else(|e| panic!("{s:?} is not base64: {e}"))
}

#[tokio::test]
async fn base64_reads_and_streams_carry_the_exact_bytes() {
    let state = StateDir::new();
    let relay = Relay::start(&state.0, &[]);
    let r = relay
        .call(
            "POST",
            "/api/sandboxes/default/processes",
            Some(ADMIN),
            Some(json!({"command": r"printf 'a\377\376b\n'"})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.json()["process_id"].as_str().unwrap_or_default().to_string();
    let path = format!("/api/sandboxes/default/processes/{id}");
    let want: &[u8] = b"a\xff\xfeb\n";

    // Wait for its end, so each read sees all of it.
    let mut text = serde_json::Value::Null;
    for _ in 0..100 {
        text = relay.call("GET", &path, Some(ADMIN), None).await.json();
        if text["process"]["state"] == json!("exited") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(text["output"], json!("a\u{fffd}\u{fffd}b\n"), "the text form is lossy: {text}");
    assert_eq!(text["next"], json!(want.len()), "offsets count bytes, not characters: {text}");

    let exact = relay.call("GET", &format!("{path}?encoding=base64"), Some(ADMIN), None).await.json();
    assert_eq!(exact["encoding"], json!("base64"), "{exact}");
    assert_eq!(b64(exact["output"].as_str().unwrap_or_default()), want, "{exact}");
    // From inside the output: exactly the rest.
    let rest = relay.call("GET", &format!("{path}?since=2&encoding=base64"), Some(ADMIN), None).await.json();
    assert_eq!(b64(rest["output"].as_str().unwrap_or_default()), &want[2..], "{rest}");

    let mut s = relay.sse("GET", &format!("{path}/stream?encoding=base64"), Some(ADMIN), None).await;
    let mut got = Vec::new();
    while let Some(e) = s.next(STEP).await {
        match e.event.as_str() {
            "output" => {
                assert_eq!(e.json()["encoding"], json!("base64"), "{e:?}");
                got.extend(b64(e.json()["data"].as_str().unwrap_or_default()));
            }
            "end" => break,
            other => panic!("unexpected {other}: {e:?}"),
        }
    }
    assert_eq!(got, want);

    let bad = relay.call("GET", &format!("{path}?encoding=utf16"), Some(ADMIN), None).await;
    assert_eq!((bad.status, bad.json()["error"]["code"].clone()), (400, json!("invalid_argument")), "{bad:?}");
}
