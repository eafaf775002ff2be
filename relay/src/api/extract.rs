//! Extractors whose rejections are the relay's JSON errors, not axum's plain text.
use axum::{
    extract::{rejection::JsonRejection, FromRequest, FromRequestParts, Request},
    http::StatusCode,
};
use serde::{
    de::{DeserializeOwned, MapAccess, Visitor},
    Deserialize, Deserializer,
};

use super::ApiError;

/// The largest JSON body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A query string.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Params(v)),
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}

/// A JSON body: always an object.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<Object<T>>::from_request(req, state).await {
            Ok(axum::Json(Object(v))) => Ok(Body(v)),
            Err(JsonRejection::BytesRejection(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::too_large(format!("request body larger than {MAX_BODY_BYTES} bytes")))
            }
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}

/// `T` read only from a JSON object. serde's derived structs also read a JSON array of their
/// fields in order (`["echo hi", null, 5]` as an exec body), a form the API never documented
/// and `deny_unknown_fields` cannot see into; found by fuzzing (hangar-fuzz's relay_json).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<T, M::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Fields(std::marker::PhantomData)).map(Object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Exec {
        command: String,
        timeout: Option<u64>,
    }

    async fn read(body: &'static str) -> Result<Exec, ApiError> {
        let req = http::Request::builder()
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Body::<Exec>::from_request(req, &()).await.map(|Body(b)| b)
    }

    #[tokio::test]
    async fn a_body_is_an_object_of_known_fields() {
        assert_eq!(
            read(r#"{"command":"ls","timeout":5}"#).await.unwrap(),
            Exec { command: "ls".into(), timeout: Some(5) }
        );
        let unknown = read(r#"{"command":"ls","colour":1}"#).await.unwrap_err();
        assert!(unknown.message.contains("unknown field `colour`"), "{}", unknown.message);
        assert!(read(r#"{"timeout":5}"#).await.unwrap_err().message.contains("missing field `command`"));
    }

    #[tokio::test]
    async fn an_array_of_the_fields_is_refused() {
        // Once accepted: serde's derived structs read a sequence of their fields in order.
        for body in [r#"["ls", 5]"#, r#"["ls"]"#, "[]", r#""ls""#, "5", "null"] {
            let e = read(body).await.unwrap_err();
            assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, "invalid_argument"), "{body}");
            assert!(e.message.contains("a JSON object"), "{body}: {}", e.message);
        }
    }
}
