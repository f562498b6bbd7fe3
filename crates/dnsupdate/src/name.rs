//! Domain names (RFC 1035 §3.1): text to wire form and back. Names are
//! kept lowercase and absolute, so that comparing them is comparing
//! canonical forms (RFC 4034 §6.2, which TSIG uses for the key name).

use std::fmt;

/// Why bytes are not a DNS message this client accepts. Defined here, with
/// names (the first thing of a message parsed, below [`crate::message`]);
/// every part of a message reports through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// a section, name or record runs past the end
    #[error("truncated")]
    Truncated,
    /// a name with a bad label type, a forward or looping pointer, or over
    /// 255 bytes
    #[error("malformed name")]
    BadName,
    /// record data that does not fit its type (an A record not 4 bytes …)
    #[error("malformed record data")]
    BadRdata,
    /// bytes after the last record
    #[error("trailing bytes after the last record")]
    Trailing,
    /// a TSIG record that is not the last of the message, or more than one
    #[error("misplaced TSIG record")]
    MisplacedTsig,
}

/// Longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL: usize = 63;
/// Longest name in wire form, root label included.
pub const MAX_WIRE: usize = 255;
/// Most compression pointers followed in one name: more is a loop or an
/// attack (a name of 255 bytes has at most 127 labels).
const MAX_POINTERS: usize = 127;

/// An absolute domain name, lowercase, in wire form (labels, each with its
/// length byte, and the root's zero byte).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name {
    wire: Vec<u8>,
}

/// Why a name in text is not a domain name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// an empty label (two dots in a row, or a leading dot)
    #[error("{0:?}: empty label")]
    EmptyLabel(String),
    /// a label over 63 bytes
    #[error("{0:?}: a label is longer than 63 bytes")]
    LongLabel(String),
    /// over 255 bytes in wire form
    #[error("{0:?}: longer than 255 bytes")]
    TooLong(String),
    /// a byte that has no place in a host or service name
    #[error("{0:?}: only letters, digits, '-' and '_' may appear in a label")]
    BadByte(String),
}

impl Name {
    /// The root name `.`.
    pub fn root() -> Name {
        Name { wire: vec![0] }
    }

    /// Parses `text` (`www.example.com` or `www.example.com.`; always taken
    /// as absolute). Letters, digits, `-` and `_` only: these names are
    /// hostnames, zones and key names an operator writes.
    pub fn parse(text: &str) -> Result<Name, NameError> {
        let t = text.strip_suffix('.').unwrap_or(text);
        if t.is_empty() {
            return Ok(Name::root());
        }
        let mut wire = Vec::with_capacity(t.len() + 2);
        for label in t.split('.') {
            if label.is_empty() {
                return Err(NameError::EmptyLabel(text.to_owned()));
            }
            if label.len() > MAX_LABEL {
                return Err(NameError::LongLabel(text.to_owned()));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(NameError::BadByte(text.to_owned()));
            }
            wire.push(u8::try_from(label.len()).unwrap_or(u8::MAX));
            wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
        }
        wire.push(0);
        if wire.len() > MAX_WIRE {
            return Err(NameError::TooLong(text.to_owned()));
        }
        Ok(Name { wire })
    }

    /// `label` prepended to this name (`_spillway-removed` + `www.example.`).
    pub fn child(&self, label: &str) -> Result<Name, NameError> {
        Name::parse(&format!("{label}.{self}"))
    }

    /// The wire form.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// Whether this name is `zone` or below it.
    pub fn is_within(&self, zone: &Name) -> bool {
        // Compare label by label from the end: suffix bytes alone could
        // match in the middle of a label.
        let mine = self.labels();
        let theirs = zone.labels();
        mine.len() >= theirs.len() && mine[mine.len() - theirs.len()..] == theirs[..]
    }

    fn labels(&self) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(&len) = self.wire.get(i) {
            if len == 0 {
                break;
            }
            let end = i + 1 + usize::from(len);
            out.push(self.wire.get(i + 1..end).unwrap_or_default());
            i = end;
        }
        out
    }

    /// Reads the name at `at` in `msg`, following compression pointers
    /// (RFC 1035 §4.1.4) only backwards, at most [`MAX_POINTERS`] of them.
    /// Returns the name and where the bytes after it (in place) start.
    pub fn decode(msg: &[u8], at: usize) -> Result<(Name, usize), ParseError> {
        let mut wire = Vec::new();
        let mut pos = at;
        let mut end = None;
        let mut pointers = 0;
        loop {
            let len = *msg.get(pos).ok_or(ParseError::Truncated)?;
            match len & 0xc0 {
                0x00 => {
                    let n = usize::from(len);
                    if n == 0 {
                        wire.push(0);
                        let after = end.unwrap_or(pos + 1);
                        if wire.len() > MAX_WIRE {
                            return Err(ParseError::BadName);
                        }
                        return Ok((Name { wire }, after));
                    }
                    let label = msg.get(pos + 1..pos + 1 + n).ok_or(ParseError::Truncated)?;
                    wire.push(len);
                    wire.extend(label.iter().map(u8::to_ascii_lowercase));
                    if wire.len() > MAX_WIRE {
                        return Err(ParseError::BadName);
                    }
                    pos += 1 + n;
                }
                0xc0 => {
                    let lo = *msg.get(pos + 1).ok_or(ParseError::Truncated)?;
                    let target = usize::from(u16::from_be_bytes([len & 0x3f, lo]));
                    pointers += 1;
                    if target >= pos || pointers > MAX_POINTERS {
                        return Err(ParseError::BadName);
                    }
                    end.get_or_insert(pos + 2);
                    pos = target;
                }
                // 0x40 and 0x80: extended label types (RFC 6891 retired them).
                _ => return Err(ParseError::BadName),
            }
        }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let labels = self.labels();
        if labels.is_empty() {
            return f.write_str(".");
        }
        for l in labels {
            // Names come from the wire too: show any byte safely.
            for &b in l {
                if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                    write!(f, "{}", char::from(b))?;
                } else {
                    write!(f, "\\{b:03}")?;
                }
            }
            f.write_str(".")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn text_and_wire() {
        let n = Name::parse("WWW.Example.test").unwrap();
        assert_eq!(n.wire(), b"\x03www\x07example\x04test\x00");
        assert_eq!(n.to_string(), "www.example.test.");
        assert_eq!(Name::parse("www.example.test.").unwrap(), n);
        assert_eq!(Name::parse(".").unwrap(), Name::root());
        assert!(n.is_within(&Name::parse("example.test").unwrap()));
        assert!(!n.is_within(&Name::parse("ample.test").unwrap()));
        assert!(n.is_within(&Name::root()));
        for bad in [
            "a..b",
            ".a",
            "a b.c",
            &"x".repeat(64),
            &"abcdefg.".repeat(40),
        ] {
            assert!(Name::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn compression_pointers_go_backwards_only() {
        // "example.test." at 0, then "www" + pointer to 0 at 14.
        let mut m = b"\x07example\x04test\x00".to_vec();
        m.extend(b"\x03www\xc0\x00");
        let (n, after) = Name::decode(&m, 14).unwrap();
        assert_eq!((n.to_string().as_str(), after), ("www.example.test.", 20));
        // A pointer to itself, and one forwards.
        assert_eq!(Name::decode(b"\xc0\x00", 0), Err(ParseError::BadName));
        assert_eq!(Name::decode(b"\xc0\x02\x00", 0), Err(ParseError::BadName));
        assert_eq!(Name::decode(b"\x05ab", 0), Err(ParseError::Truncated));
        assert_eq!(Name::decode(b"\x40", 0), Err(ParseError::BadName));
    }
}
