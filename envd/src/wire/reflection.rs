//! gRPC server reflection, built on its first request.
//!
//! tonic-reflection decodes the whole descriptor set and indexes every symbol when its service is
//! built: about 400 KiB of heap for the two versions together, most of what an idle daemon has
//! allocated, for a service only tools such as `grpcurl` call. Each version is built once, on
//! the first request that reaches it, and kept.

use std::{
    convert::Infallible,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
};

use futures::future::{self, Either};
use tonic::{body::Body, server::NamedService};
use tower::Service;

/// `routes` with both versions of the reflection service (`grpc.reflection.v1` and `v1alpha`).
pub fn add_to(routes: tonic::service::Routes) -> tonic::service::Routes {
    routes.add_service(Lazy::new(|| builder().build_v1())).add_service(Lazy::new(|| builder().build_v1alpha()))
}

fn builder() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(hangar_proto::FILE_DESCRIPTOR_SET)
}

/// A service built by `build` on its first call. A build that fails (the descriptor set is
/// compiled in, so it does not) answers every call `unimplemented`, as a server without the
/// service would.
pub struct Lazy<S, B> {
    service: Arc<OnceLock<Option<S>>>,
    build: Arc<B>,
}

impl<S, B> Lazy<S, B> {
    fn new(build: B) -> Self {
        Lazy { service: Arc::new(OnceLock::new()), build: Arc::new(build) }
    }
}

impl<S, B> Clone for Lazy<S, B> {
    fn clone(&self) -> Self {
        Lazy { service: self.service.clone(), build: self.build.clone() }
    }
}

impl<S: NamedService, B> NamedService for Lazy<S, B> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<Body>> for Lazy<S, B>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible> + Clone,
    B: Fn() -> Result<S, tonic_reflection::server::Error>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, future::Ready<Result<http::Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness is the built service's, asked in `call`: tonic's generated servers are
        // always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self.service.get_or_init(|| (self.build)().ok()) {
            Some(service) => Either::Left(service.clone().call(req)),
            None => Either::Right(future::ready(Ok(
                tonic::Status::unimplemented("server reflection is unavailable").into_http()
            ))),
        }
    }
}
