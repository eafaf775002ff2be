//! Reaching a pod's daemon from outside the cluster: a tonic connector whose every connection is
//! a new port-forward stream to the pod's port 49983 through the API server (the pods'
//! `portforward` subresource over WebSocket).
use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::io::DuplexStream;

use super::{api_error, pod::ENVD_PORT};
use crate::providers::ProviderError;

#[derive(Clone)]
pub(super) struct PortForward {
    pods: Api<Pod>,
    pod: String,
}

impl PortForward {
    pub(super) fn new(pods: Api<Pod>, pod: String) -> Self {
        Self { pods, pod }
    }
}

impl tower::Service<http::Uri> for PortForward {
    type Response = TokioIo<DuplexStream>;
    type Error = ProviderError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let (pods, pod) = (self.pods.clone(), self.pod.clone());
        Box::pin(async move {
            let mut forwarder =
                pods.portforward(&pod, &[ENVD_PORT]).await.map_err(|e| api_error("port-forwarding to the pod", e))?;
            let stream = forwarder.take_stream(ENVD_PORT).ok_or_else(|| {
                ProviderError::Engine("port-forwarding to the pod: no stream for the daemon's port".into())
            })?;
            // The forwarder's task carries the bytes until either side closes.
            tokio::spawn(async move {
                let _ = forwarder.join().await;
            });
            Ok(TokioIo::new(stream))
        })
    }
}
