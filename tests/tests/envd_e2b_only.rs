//! `hangar-envd --e2b-only` (`HANGAR_ENVD_E2B_ONLY=1`): E2B's services on the one port, and
//! hangar's answered as a server without them answers, as E2B's own envd would; seen from
//! outside over gRPC, Connect and reflection.

use hangar_e2e::*;
use serde_json::json;
use tonic_reflection::pb::v1::{
    server_reflection_client::ServerReflectionClient, server_reflection_request::MessageRequest,
    server_reflection_response::MessageResponse, ServerReflectionRequest,
};

/// E2B's services work as ever; every one of hangar's answers `unimplemented` over gRPC.
#[tokio::test]
async fn grpc_serves_e2b_and_answers_hangars_as_unimplemented() {
    let envd = Envd::builder().arg("--e2b-only").start();
    let mut process = envd.process().await;
    let run = grpc_run(&mut process, bash("echo hi"), STEP).await;
    assert_eq!(run.stdout, b"hi\n");
    assert_eq!(run.end.as_ref().map(|e| e.exit_code), Some(0));
    within(STEP, "List", process.list(pb::ListRequest {})).await.expect("E2B's List answers");

    let info = within(STEP, "Info", envd.daemon().await.info(ext::InfoRequest {})).await;
    assert_eq!(info.expect_err("Daemon/Info is not served").code(), tonic::Code::Unimplemented);
    let list =
        within(STEP, "hangar's List", envd.processes().await.list(ext::ListRequest { running_only: false })).await;
    assert_eq!(list.expect_err("Processes/List is not served").code(), tonic::Code::Unimplemented);
    let attach = ext::AttachRequest { process: by_pid(1), since: None };
    let attach = within(STEP, "Attach", envd.processes().await.attach(attach)).await;
    assert_eq!(attach.expect_err("Processes/Attach is not served").code(), tonic::Code::Unimplemented);
    let mut files = ext::files_client::FilesClient::new(envd.channel().await);
    let follow = ext::FollowRequest { path: "/tmp".into(), offset: None, allow_network_mounts: false };
    let follow = within(STEP, "Follow", files.follow(follow)).await;
    assert_eq!(follow.expect_err("Files/Follow is not served").code(), tonic::Code::Unimplemented);
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

/// Reflection lists E2B's two services and nothing of hangar's.
#[tokio::test]
async fn reflection_lists_only_e2bs_services() {
    let envd = Envd::builder().arg("--e2b-only").start();
    let mut client = ServerReflectionClient::new(envd.channel().await);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut s = within(STEP, "reflection", client.server_reflection_info(tokio_stream::iter(vec![req])))
        .await
        .expect("ServerReflectionInfo")
        .into_inner();
    let first = within(STEP, "list services", s.message()).await.expect("reflection stream").expect("a response");
    let mut names: Vec<String> = match first.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => l.service.into_iter().map(|s| s.name).collect(),
        other => panic!("want ListServicesResponse, got {other:?}"),
    };
    names.retain(|n| !n.starts_with("grpc.reflection."));
    names.sort();
    assert_eq!(names, ["filesystem.Filesystem", "process.Process"]);
}
