//! Cutting strings to a size on a char boundary, so that a cut never splits a UTF-8 sequence.

/// The longest prefix of `s` of at most `max` bytes, and whether anything was cut.
pub(crate) fn bytes(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// The first `max` chars of `s`, and whether anything was cut.
pub(crate) fn chars(s: &str, max: usize) -> (&str, bool) {
    match s.char_indices().nth(max) {
        Some((end, _)) => (&s[..end], true),
        None => (s, false),
    }
}

/// The first `max` chars of `s`, trimmed, as an owned string: the shape of every `summary` field.
pub(crate) fn summary(s: &str, max: usize) -> String {
    chars(s.trim(), max).0.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_char_boundaries() {
        assert_eq!(bytes("héllo", 2), ("h", true));
        assert_eq!(bytes("héllo", 3), ("hé", true));
        assert_eq!(bytes("héllo", 6), ("héllo", false));
        assert_eq!(bytes("", 0), ("", false));
        assert_eq!(chars("héllo", 2), ("hé", true));
        assert_eq!(chars("héllo", 5), ("héllo", false));
        assert_eq!(summary("  a b  ", 200), "a b");
    }
}
