//! gRPC server reflection, in both versions tools call: `v1` and the older `v1alpha`.

use hangar_e2e::*;

/// One test per reflection version: the generated types differ between `v1` and `v1alpha`,
/// their shapes do not.
macro_rules! reflection_lists_the_services {
    ($test:ident, $version:ident) => {
        #[tokio::test]
        async fn $test() {
            use tonic_reflection::pb::$version::{
                server_reflection_client::ServerReflectionClient, server_reflection_request::MessageRequest,
                server_reflection_response::MessageResponse, ServerReflectionRequest,
            };
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
            let first =
                within(STEP, "list services", s.message()).await.expect("reflection stream").expect("a response");
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
            let second = within(STEP, "file containing symbol", s.message())
                .await
                .expect("reflection stream")
                .expect("a response");
            match second.message_response {
                Some(MessageResponse::FileDescriptorResponse(f)) => {
                    assert!(!f.file_descriptor_proto.is_empty())
                }
                other => panic!("want FileDescriptorResponse, got {other:?}"),
            }
        }
    };
}

reflection_lists_the_services!(reflection_lists_the_services, v1);
reflection_lists_the_services!(reflection_v1alpha_lists_the_services, v1alpha);
