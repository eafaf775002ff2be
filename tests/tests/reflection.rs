//! gRPC server reflection.

use hangar_e2e::*;
use tonic_reflection::pb::v1::{
    server_reflection_client::ServerReflectionClient, server_reflection_request::MessageRequest,
    server_reflection_response::MessageResponse, ServerReflectionRequest,
};

#[tokio::test]
async fn reflection_lists_the_services() {
    let envd = Envd::start(&[]);
    let mut client = ServerReflectionClient::new(envd.channel().await);
    let reqs = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol("process.Process".into())),
        },
    ];
    let mut s = within(STEP, "reflection", client.server_reflection_info(tokio_stream::iter(reqs)))
        .await
        .expect("ServerReflectionInfo")
        .into_inner();
    let first = within(STEP, "list services", s.message()).await.expect("reflection stream").expect("a response");
    let names: Vec<String> = match first.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => l.service.into_iter().map(|s| s.name).collect(),
        other => panic!("want ListServicesResponse, got {other:?}"),
    };
    // Every service in proto/: E2B's two and hangar's three.
    for want in [
        "process.Process",
        "filesystem.Filesystem",
        "hangar.envd.v1.Processes",
        "hangar.envd.v1.Files",
        "hangar.envd.v1.Daemon",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    let second =
        within(STEP, "file containing symbol", s.message()).await.expect("reflection stream").expect("a response");
    match second.message_response {
        Some(MessageResponse::FileDescriptorResponse(f)) => {
            assert!(!f.file_descriptor_proto.is_empty())
        }
        other => panic!("want FileDescriptorResponse, got {other:?}"),
    }
}

/// The older `v1alpha` reflection, which some tools still call, answers too.
#[tokio::test]
async fn reflection_v1alpha_lists_the_services() {
    use tonic_reflection::pb::v1alpha::{
        server_reflection_client::ServerReflectionClient, server_reflection_request::MessageRequest,
        server_reflection_response::MessageResponse, ServerReflectionRequest,
    };
    let envd = Envd::start(&[]);
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
    let names: Vec<String> = match first.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => l.service.into_iter().map(|s| s.name).collect(),
        other => panic!("want ListServicesResponse, got {other:?}"),
    };
    assert!(names.iter().any(|n| n == "hangar.envd.v1.Processes"), "{names:?}");
}
