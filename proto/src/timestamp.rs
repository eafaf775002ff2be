//! `google.protobuf.Timestamp` with the canonical proto3 JSON form: RFC 3339 in UTC with a `Z`
//! suffix (pbjson-types writes `+00:00`, which strict parsers reject).
use std::{fmt, time::SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        Timestamp { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
    }
}

impl Timestamp {
    fn to_datetime(self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(self.seconds, u32::try_from(self.nanos).ok()?)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_datetime() {
            Some(dt) => f.write_str(&dt.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            None => write!(f, "{}s+{}ns", self.seconds, self.nanos),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let dt = DateTime::parse_from_rfc3339(&s).map_err(|e| de::Error::custom(format!("timestamp {s:?}: {e}")))?;
        Ok(Timestamp { seconds: dt.timestamp(), nanos: dt.timestamp_subsec_nanos() as i32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_round_trips() {
        let t = Timestamp { seconds: 1_700_000_000, nanos: 5_000_000 };
        let j = serde_json::to_string(&t).unwrap();
        assert_eq!(j, "\"2023-11-14T22:13:20.005Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&j).unwrap(), t);
        let offset: Timestamp = serde_json::from_str("\"2023-11-14T23:13:20.005+01:00\"").unwrap();
        assert_eq!(offset, t);
        assert!(serde_json::from_str::<Timestamp>("\"yesterday\"").is_err());
    }
}
