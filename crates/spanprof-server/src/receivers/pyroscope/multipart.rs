//! `multipart/form-data` bodies (RFC 7578) already in memory: the parts by name, borrowed
//! from the body.

/// One part of a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part<'a> {
    /// The `name` of its `Content-Disposition`.
    pub name: String,
    /// Its bytes, as sent.
    pub body: &'a [u8],
}

/// The boundary of a `multipart/form-data` content type, or `None` when `content_type` is not
/// one or names no boundary.
pub fn boundary(content_type: &str) -> Option<String> {
    let mut params = content_type.split(';');
    let mime = params.next()?.trim();
    if !mime.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        (!v.is_empty()).then(|| v.to_owned())
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let first = needle[0];
    let last_start = hay.len() - needle.len();
    let mut i = 0;
    while i <= last_start {
        i += hay[i..=last_start].iter().position(|&b| b == first)?;
        if &hay[i..i + needle.len()] == needle {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The parameter `key` of a header value such as `form-data; name="profile"; filename="x"`.
fn header_param(value: &str, key: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case(key) {
            return None;
        }
        let v = v.trim();
        Some(
            v.strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v)
                .to_owned(),
        )
    })
}

/// What is malformed in a multipart body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultipartError {
    /// No `--boundary` line (the delimiter looked for).
    #[error("the multipart body has no boundary line {0:?}")]
    NoBoundary(String),
    /// A boundary line without its CRLF.
    #[error("a multipart boundary line does not end with CRLF")]
    BoundaryLineEnd,
    /// A part whose headers do not end.
    #[error("a multipart part has no blank line after its headers")]
    NoBlankLine,
    /// A part with headers that are not text.
    #[error("a multipart part has headers that are not UTF-8")]
    HeadersNotUtf8,
    /// The body ends before its closing `--boundary--` (the delimiter looked for).
    #[error("the multipart body ends without its closing boundary {0:?}--")]
    Unclosed(String),
    /// A part without a `Content-Disposition` name.
    #[error("a multipart part has no Content-Disposition name")]
    NoName,
}

/// Splits `body` into its parts. Errors name what is malformed.
pub fn parse<'a>(body: &'a [u8], boundary: &str) -> Result<Vec<Part<'a>>, MultipartError> {
    let delimiter = format!("--{boundary}");
    let start = find(body, delimiter.as_bytes())
        .ok_or_else(|| MultipartError::NoBoundary(delimiter.clone()))?;
    let next_delimiter = format!("\r\n--{boundary}");
    let mut rest = &body[start + delimiter.len()..];
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        // Transport padding, then the line end after the boundary.
        let pad = rest
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        rest = rest[pad..]
            .strip_prefix(b"\r\n")
            .ok_or(MultipartError::BoundaryLineEnd)?;
        let head_end = find(rest, b"\r\n\r\n")
            .map(|i| (i, i + 4))
            .or_else(|| rest.starts_with(b"\r\n").then_some((0, 2)))
            .ok_or(MultipartError::NoBlankLine)?;
        let head =
            std::str::from_utf8(&rest[..head_end.0]).map_err(|_| MultipartError::HeadersNotUtf8)?;
        let mut name = None;
        for line in head.split("\r\n") {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-disposition") {
                    name = header_param(v, "name");
                }
            }
        }
        let content = &rest[head_end.1..];
        let end = find(content, next_delimiter.as_bytes())
            .ok_or_else(|| MultipartError::Unclosed(delimiter.clone()))?;
        parts.push(Part {
            name: name.ok_or(MultipartError::NoName)?,
            body: &content[..end],
        });
        rest = &content[end + next_delimiter.len()..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_multipart_writer_output() {
        let body = b"--b0\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n\x1f\x8b\r\n--x\r\n--b0\r\nContent-Disposition: form-data; name=\"sample_type_config\"; filename=\"sample_type_config.json\"\r\nContent-Type: application/octet-stream\r\n\r\n{}\r\n--b0--\r\n";
        let parts = parse(body, "b0").unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "profile");
        assert_eq!(parts[0].body, b"\x1f\x8b\r\n--x");
        assert_eq!(parts[1].name, "sample_type_config");
        assert_eq!(parts[1].body, b"{}");
        assert_eq!(
            boundary("multipart/form-data; boundary=\"b0\"").as_deref(),
            Some("b0")
        );
        assert_eq!(boundary("application/octet-stream"), None);
    }

    #[test]
    fn names_what_is_malformed() {
        assert!(parse(b"nothing", "b")
            .unwrap_err()
            .to_string()
            .contains("no boundary"));
        let truncated = b"--b\r\nContent-Disposition: form-data; name=\"profile\"\r\n\r\nabc";
        assert!(parse(truncated, "b")
            .unwrap_err()
            .to_string()
            .contains("closing boundary"));
        let nameless = b"--b\r\nContent-Type: text/plain\r\n\r\nabc\r\n--b--";
        assert!(parse(nameless, "b")
            .unwrap_err()
            .to_string()
            .contains("name"));
    }
}
