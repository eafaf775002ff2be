//! References people type for a sandbox, a session, a job or an inbox item: beside the full id
//! and the name, a unique prefix of the id (`sbx_4ba4`), of the name, and a unit's short name
//! (`HGR-8AA3`, the id's tail). What a reference may match is decided here, once; each kind's
//! resolver (`Sandboxes::get`, `sessions::find`, `jobs::find`, `inbox::find`) asks the store for
//! the rows it matches among those the caller sees and lets `pick` choose.
use schemars::JsonSchema;
use serde::Serialize;

/// Characters an id prefix needs after its kind's `xxx_`, and a name prefix in all: fewer is a
/// guess, not a reference.
pub const MIN_PREFIX: usize = 4;

/// What every unit's short name starts with (the fleet's `short`).
pub const SHORT_PREFIX: &str = "HGR-";

/// One of the rows an ambiguous reference matched, as the error lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Candidate {
    pub id: String,
    pub name: String,
}

/// What a reference that is not an exact id or name may match: rows whose id starts with
/// `id_prefix`, whose id ends with `id_suffix` (a short name), or whose name starts with
/// `name_prefix`. The id's parts hold only `[a-z0-9_-]`, the name's `[A-Za-z0-9_.-]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pattern {
    pub id_prefix: Option<String>,
    pub id_suffix: Option<String>,
    pub name_prefix: Option<String>,
}

impl Pattern {
    pub fn is_empty(&self) -> bool {
        self.id_prefix.is_none() && self.id_suffix.is_none() && self.name_prefix.is_none()
    }
}

fn plain(s: &str) -> bool {
    s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
}

/// The pattern of `reference` for a kind whose ids start with one of `id_kinds` (`["sbx_"]`;
/// the inbox's `["inb_", "apr_", "qst_"]`); `short` where the kind has short names (sandboxes).
/// Names are matched by prefix only where `names` (an item's title is not a name to type).
pub fn pattern(reference: &str, id_kinds: &[&str], short: bool, names: bool) -> Pattern {
    let mut p = Pattern::default();
    let lower = reference.to_ascii_lowercase();
    if !plain(&lower) {
        return p;
    }
    if let Some(kind) = id_kinds.iter().find(|k| lower.starts_with(*k)) {
        if lower.len() >= kind.len() + MIN_PREFIX {
            p.id_prefix = Some(lower.clone());
        }
    }
    let short_prefix = SHORT_PREFIX.to_ascii_lowercase();
    if short {
        if let Some(tail) = lower.strip_prefix(&short_prefix) {
            if tail.len() >= MIN_PREFIX && tail.bytes().all(|c| c.is_ascii_hexdigit()) {
                p.id_suffix = Some(tail.to_string());
            }
        }
    }
    let name_like = reference.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.');
    if names && reference.len() >= MIN_PREFIX && name_like {
        p.name_prefix = Some(reference.to_string());
    }
    p
}

/// What a reference matched among the rows the caller sees.
#[derive(Debug, PartialEq, Eq)]
pub enum Picked<T> {
    One(T),
    None,
    /// More than one: the caller's own candidates.
    Many(Vec<Candidate>),
}

/// Chooses among the rows a pattern matched: the caller's own (`mine`) first, so another
/// person's row never makes one of the caller's ambiguous, and is never listed beside it; where
/// none is the caller's, the rest (only kinds every caller may read, sandboxes, pass any).
pub fn pick<T>(rows: Vec<T>, mine: impl Fn(&T) -> bool, candidate: impl Fn(&T) -> Candidate) -> Picked<T> {
    let (own, others): (Vec<T>, Vec<T>) = rows.into_iter().partition(|r| mine(r));
    let mut chosen = if own.is_empty() { others } else { own };
    match chosen.len() {
        0 => Picked::None,
        1 => Picked::One(chosen.remove(0)),
        _ => {
            let mut c: Vec<Candidate> = chosen.iter().map(candidate).collect();
            c.sort_by(|a, b| a.id.cmp(&b.id));
            Picked::Many(c)
        }
    }
}

/// The shortest tail of each id (at least `MIN_PREFIX` characters) that no other id in `ids`
/// ends with, uppercased after `SHORT_PREFIX`: `HGR-8AA3`, lengthened only where two would
/// collide. The tail never reaches into the id's `xxx_`.
pub fn short_names<'a>(ids: impl IntoIterator<Item = &'a str>) -> std::collections::HashMap<&'a str, String> {
    let ids: Vec<&str> = ids.into_iter().collect();
    let mut reversed: Vec<(Vec<u8>, &str)> = ids.iter().map(|id| (id.bytes().rev().collect(), *id)).collect();
    reversed.sort();
    reversed.dedup_by(|a, b| a.1 == b.1);
    let common = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let mut out = std::collections::HashMap::new();
    for (i, (rev, id)) in reversed.iter().enumerate() {
        let before = i.checked_sub(1).map_or(0, |j| common(rev, &reversed[j].0));
        let after = reversed.get(i + 1).map_or(0, |n| common(rev, &n.0));
        let body = id.split_once('_').map_or(*id, |(_, b)| b);
        let n = (before.max(after) + 1).max(MIN_PREFIX).min(body.len());
        let tail = &id[id.len() - n..];
        out.insert(*id, format!("{SHORT_PREFIX}{}", tail.to_ascii_uppercase()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_is_a_prefix_or_a_short_name_only_when_long_enough_and_plain() {
        let sbx = |r| pattern(r, &["sbx_"], true, true);
        assert_eq!(sbx("sbx_4ba4").id_prefix.as_deref(), Some("sbx_4ba4"));
        assert_eq!(sbx("SBX_4BA4").id_prefix.as_deref(), Some("sbx_4ba4"));
        assert_eq!(sbx("sbx_4ba").id_prefix, None);
        assert_eq!(sbx("hgr-8aa3").id_suffix.as_deref(), Some("8aa3"));
        assert_eq!(sbx("HGR-8AA3").id_suffix.as_deref(), Some("8aa3"));
        assert_eq!(sbx("HGR-8A").id_suffix, None);
        assert_eq!(sbx("HGR-8AZ3").id_suffix, None);
        assert_eq!(sbx("web-1").name_prefix.as_deref(), Some("web-1"));
        assert_eq!(sbx("web").name_prefix, None);
        // Nothing but plain characters reaches the store's comparisons.
        assert!(sbx("sbx_4ba4%").is_empty() && sbx("we'b-'1").is_empty() && sbx("sbx_4ba4\u{e9}").is_empty());
        let inbox = pattern("apr_18ab", &["inb_", "apr_", "qst_"], false, false);
        assert_eq!((inbox.id_prefix.as_deref(), inbox.id_suffix, inbox.name_prefix), (Some("apr_18ab"), None, None));
    }

    #[test]
    fn the_callers_own_rows_are_chosen_and_only_they_are_listed() {
        let c = |r: &(&str, bool)| Candidate { id: r.0.into(), name: r.0.into() };
        let mine = |r: &(&str, bool)| r.1;
        assert_eq!(pick(vec![("a", true), ("b", false)], mine, c), Picked::One(("a", true)));
        assert_eq!(pick(vec![("b", false)], mine, c), Picked::One(("b", false)));
        assert_eq!(pick(Vec::<(&str, bool)>::new(), mine, c), Picked::None);
        let Picked::Many(listed) = pick(vec![("c", true), ("b", false), ("a", true)], mine, c) else { panic!() };
        assert_eq!(listed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn short_names_lengthen_only_where_two_would_collide() {
        let ids = ["sbx_00000000aaaa8aa3", "sbx_00000000bbbb1234", "sbx_00000000ccc11234", "sbx_0000000000000001"];
        let s = short_names(ids);
        assert_eq!(s["sbx_00000000aaaa8aa3"], "HGR-8AA3");
        assert_eq!(s["sbx_00000000bbbb1234"], "HGR-B1234");
        assert_eq!(s["sbx_00000000ccc11234"], "HGR-11234");
        assert_eq!(s["sbx_0000000000000001"], "HGR-0001");
        // Alone, every id has four characters.
        assert_eq!(short_names(["sbx_00000000bbbb1234"])["sbx_00000000bbbb1234"], "HGR-1234");
    }
}
