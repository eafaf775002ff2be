//! A local sandbox's options (the sandbox's `options` object), validated, and what its row
//! shows of them.
use serde_json::{json, Value};

use super::disk::{self, MAX_MIB, MIN_MIB};
use crate::providers::{
    options::{bad, object},
    ProviderError,
};

/// Options a local sandbox takes.
const OPTIONS: &str = "disk_mib";

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Options {
    /// The size of the sandbox's own filesystem; `None` where the relay gives it none.
    pub(super) disk_mib: Option<u64>,
}

impl Options {
    pub(super) fn parse(options: &Value, support: &disk::Support) -> Result<Options, ProviderError> {
        let map = object(options, "local", OPTIONS)?;
        let asked = match map.get("disk_mib") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(m) if (MIN_MIB..=MAX_MIB).contains(&m) => Some(m),
                _ => return Err(bad(format!("disk_mib: a whole number of MiB from {MIN_MIB} to {MAX_MIB}"))),
            },
        };
        let disk_mib = match (support, asked) {
            (disk::Support::Images { default_mib, .. }, asked) => Some(asked.unwrap_or(*default_mib)),
            (disk::Support::Unavailable(_), None) => None,
            // A bound asked for and not given would be worse than none asked for.
            (disk::Support::Unavailable(why), Some(_)) => {
                return Err(bad(format!(
                    "disk_mib: this relay cannot give local sandboxes a filesystem of their own ({why})"
                )))
            }
        };
        Ok(Options { disk_mib })
    }

    /// What the sandbox's row keeps as its options: every option, defaults filled in
    /// (`disk_mib: null` for a work directory on the state directory's filesystem).
    pub(super) fn to_json(&self) -> Value {
        json!({ "disk_mib": self.disk_mib })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images() -> disk::Support {
        disk::Support::Images { mkfs: "/sbin/mkfs.ext4".into(), mount: "/bin/mount".into(), default_mib: 512 }
    }

    #[test]
    fn disk_mib_is_bounded_and_defaults_to_the_relays() {
        let parse = |v: Value| Options::parse(&v, &images()).map(|o| o.disk_mib);
        assert_eq!(parse(json!({})).ok(), Some(Some(512)));
        assert_eq!(parse(Value::Null).ok(), Some(Some(512)));
        assert_eq!(parse(json!({"disk_mib": null})).ok(), Some(Some(512)));
        assert_eq!(parse(json!({"disk_mib": 64})).ok(), Some(Some(64)));
        assert_eq!(parse(json!({"disk_mib": 1048576})).ok(), Some(Some(1048576)));
        for v in [
            json!({"disk_mib": 63}),
            json!({"disk_mib": 1048577}),
            json!({"disk_mib": -1}),
            json!({"disk_mib": 100.5}),
            json!({"disk_mib": "100"}),
            json!({"image": "x"}),
            json!(["disk_mib"]),
        ] {
            let e = parse(v.clone()).expect_err("refused");
            assert!(matches!(e, ProviderError::BadOptions(_)), "{v}: {e}");
        }
        let e = parse(json!({"disk_mib": 1})).expect_err("refused").to_string();
        assert!(e.contains("64 to 1048576"), "the error names the range: {e}");
    }

    #[test]
    fn without_images_the_row_says_so_and_a_bound_is_refused() {
        let none = disk::Support::Unavailable("the relay is not root".into());
        let o = Options::parse(&json!({}), &none).expect("no options");
        assert_eq!(o.to_json(), json!({"disk_mib": null}));
        let e = Options::parse(&json!({"disk_mib": 128}), &none).expect_err("refused").to_string();
        assert!(e.contains("not root"), "{e}");
    }
}
