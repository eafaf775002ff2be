//! `hangar-envd --e2b-only` (`HANGAR_ENVD_E2B_ONLY=1`): E2B's services on the one port, and
//! hangar's answered as a server without them answers, as E2B's own envd would; seen from
//! outside over HTTP/1.1 (Connect and the plain routes), the only protocol its port speaks.

use hangar_e2e::*;
use hangar_proto::process::process_client::ProcessClient;
use serde_json::json;
use tonic::transport::Endpoint;

/// The port speaks HTTP/1.1 alone, as E2B's envd does: a gRPC client (HTTP/2 over cleartext)
/// gets nothing, while the same daemon answers Connect and the plain routes over HTTP/1.1.
#[tokio::test]
async fn the_port_speaks_http1_alone_so_grpc_fails() {
    let envd = Envd::builder().arg("--e2b-only").start();
    let grpc = Endpoint::from_shared(envd.url()).expect("endpoint").connect_lazy();
    let list = within(STEP, "gRPC List", ProcessClient::new(grpc).list(pb::ListRequest {})).await;
    assert!(list.is_err(), "gRPC over h2c answered: {list:?}");
    let (status, body) = envd.unary("/process.Process/List", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(envd.http("GET", "/health", &[], "").await.status, 204);
    // Without the flag, the same binary serves gRPC.
    let full = Envd::start(&[]);
    let mut process = full.process().await;
    within(STEP, "gRPC List", process.list(pb::ListRequest {})).await.expect("gRPC answers");
}

/// Over Connect, hangar's procedures are unknown ones (as on any server without them): the
/// same answer as a procedure that never existed. E2B's plain routes stay.
#[tokio::test]
async fn connect_answers_hangars_procedures_as_unknown_ones() {
    let envd = Envd::builder().env("HANGAR_ENVD_E2B_ONLY", "1").start();
    let (status, body) = envd.unary("/process.Process/List", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let unknown = envd.unary("/nothing.Here/Never", &json!({})).await;
    assert_eq!(unknown.1["code"], json!("unimplemented"), "{}", unknown.1);
    for path in ["/hangar.envd.v1.Daemon/Info", "/hangar.envd.v1.Processes/List", "/hangar.envd.v1.Processes/Signal"] {
        let (status, body) = envd.unary(path, &json!({})).await;
        assert_eq!((status, &body["code"]), (unknown.0, &json!("unimplemented")), "{path}: {body}");
    }
    let s = envd.open_stream("/hangar.envd.v1.Files/WatchDir", &json!({"path": "/tmp"}), &[]).await;
    assert_eq!(s.collect(STEP).await.error_code().as_deref(), Some("unimplemented"));
    assert_eq!(envd.http("GET", "/health", &[], "").await.status, 204);
    // Without the flag, the same daemon binary serves hangar's Info.
    let full = Envd::start(&[]);
    assert_eq!(full.unary("/hangar.envd.v1.Daemon/Info", &json!({})).await.0, 200);
}
