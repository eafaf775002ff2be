//! `X-Access-Token`: from the environment, from a file, and set by `POST /init`.

use hangar_e2e::*;
use serde_json::json;

async fn assert_token_required(envd: &Envd, token: &str) {
    // Connect unary
    let (status, body) = envd.unary("/process.Process/List", &json!({})).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthenticated")), "no token: {body}");
    let (status, body) = envd.unary_h("/process.Process/List", &json!({}), &[("x-access-token", "wrong")]).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthenticated")), "wrong token: {body}");
    let (status, body) = envd.unary_h("/process.Process/List", &json!({}), &[("x-access-token", token)]).await;
    assert_eq!(status, 200, "right token: {body}");

    // Connect stream: refused, and nothing started
    let out = envd
        .server_stream("/process.Process/Start", &json!({"process": {"cmd": "/bin/echo", "args": ["leak"]}}), &[], STEP)
        .await;
    assert_eq!(out.error_code().as_deref(), Some("unauthenticated"), "{out:#?}");
    assert!(out.messages.is_empty(), "{out:#?}");
    let out = envd
        .server_stream(
            "/process.Process/Start",
            &json!({"process": {"cmd": "/bin/echo", "args": ["ok"]}}),
            &[("x-access-token", token)],
            STEP,
        )
        .await;
    out.assert_clean_end();
    assert_eq!(out.collected().stdout_str(), "ok\n");

    // gRPC
    let mut client = envd.process().await;
    let err = client.list(pb::ListRequest {}).await.expect_err("gRPC List without a token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let req = with_meta(tonic::Request::new(pb::ListRequest {}), "x-access-token", token);
    client.list(req).await.expect("gRPC List with the token");
    let mut procs = envd.processes().await;
    let err = procs.list(ext::ListRequest { running_only: false }).await.expect_err("hangar List without a token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    // plain routes
    let r = envd.http("GET", "/envs", &[], "").await;
    assert_eq!(r.status, 401, "/envs without a token: {r:?}");
    assert_eq!(r.json()["code"], json!(401), "plain routes' errors are {{code: <HTTP status>}}: {r:?}");
    let r = envd.http("GET", "/metrics", &[], "").await;
    assert_eq!(r.status, 401, "/metrics without a token: {r:?}");
    // once a token is set, /init needs it too
    let r = envd.http("POST", "/init", &[("content-type", "application/json")], "{}").await;
    assert_eq!(r.status, 401, "/init without the token: {r:?}");
    let r = envd.http("POST", "/init", &[("content-type", "application/json"), ("x-access-token", token)], "{}").await;
    assert_eq!(r.status, 204, "/init with the token: {r:?}");
    let r = envd.http("GET", "/envs", &[("x-access-token", token)], "").await;
    assert_eq!(r.status, 200, "/envs with the token: {r:?}");
    assert_eq!(envd.health().await, 204, "/health never needs a token");
}

#[tokio::test]
async fn token_from_environment() {
    let mut envd = Envd::builder().env("HANGAR_ENVD_ACCESS_TOKEN", "secret").start();
    assert_token_required(&envd, "secret").await;
    envd.assert_healthy_no_leaks(std::time::Duration::from_secs(2)).await;
}

#[tokio::test]
async fn token_from_file() {
    let path = std::env::temp_dir().join(format!("hangar-e2e-token-{}", std::process::id()));
    std::fs::write(&path, "filetoken\n").unwrap();
    let envd = Envd::start(&["--access-token-file", path.to_str().unwrap()]);
    assert_token_required(&envd, "filetoken").await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn init_sets_token() {
    let envd = Envd::start(&[]);
    // open before any token
    let (status, body) = envd.unary("/process.Process/List", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(envd.http("GET", "/envs", &[], "").await.status, 200);

    let r = envd
        .http(
            "POST",
            "/init",
            &[("content-type", "application/json")],
            json!({"accessToken": "from-init", "timestamp": "2024-01-01T00:00:00Z", "unknownKey": 1}).to_string(),
        )
        .await;
    assert_eq!(r.status, 204, "{r:?}");
    assert_token_required(&envd, "from-init").await;
}
