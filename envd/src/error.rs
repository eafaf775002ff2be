//! The one error type every RPC answers with; both transports render it (gRPC status, Connect JSON).
use tonic::Code;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct RpcError {
    pub code: Code,
    pub message: String,
}

macro_rules! ctor {
    ($($name:ident => $code:ident),* $(,)?) => {
        impl RpcError {
            $(pub fn $name(message: impl Into<String>) -> Self {
                Self { code: Code::$code, message: message.into() }
            })*
        }
    };
}

ctor! {
    invalid_argument => InvalidArgument,
    not_found => NotFound,
    already_exists => AlreadyExists,
    failed_precondition => FailedPrecondition,
    out_of_range => OutOfRange,
    unauthenticated => Unauthenticated,
    permission_denied => PermissionDenied,
    resource_exhausted => ResourceExhausted,
    deadline_exceeded => DeadlineExceeded,
    data_loss => DataLoss,
    unimplemented => Unimplemented,
    unavailable => Unavailable,
    internal => Internal,
}

impl From<RpcError> for tonic::Status {
    fn from(e: RpcError) -> Self {
        tonic::Status::new(e.code, e.message)
    }
}

impl From<tonic::Status> for RpcError {
    fn from(s: tonic::Status) -> Self {
        normalize(Self { code: s.code(), message: s.message().to_string() })
    }
}

/// tonic's framing calls an oversize message `out_of_range`; gRPC's own convention (grpc-go,
/// connect-go) and this daemon's documentation say `resource_exhausted`.
pub fn normalize(e: RpcError) -> RpcError {
    if e.code == Code::OutOfRange && e.message.contains("message length too large") {
        return RpcError { code: Code::ResourceExhausted, message: e.message };
    }
    e
}
