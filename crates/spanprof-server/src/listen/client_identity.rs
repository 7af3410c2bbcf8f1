//! Who a client certificate says the client is (mutual TLS): the subject's common name, the
//! subject alternative names and the certificate's SHA-256 fingerprint, read from the DER of
//! a leaf certificate rustls has already verified against `server.tls.client_ca_file`.
//!
//! A few dozen lines of DER reading instead of an X.509 crate: only these fields are needed,
//! and the certificate was already parsed and checked by webpki.

use std::net::IpAddr;

/// The verified client certificate of a connection, put in the extensions of each of its
/// requests (`request.extensions().get::<ClientIdentity>()`). Absent when the client showed
/// no certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The subject's common name (the last one when there are several), if any.
    pub common_name: Option<String>,
    /// The subject alternative names, in the certificate's order (kinds other than DNS,
    /// URI, email and IP are left out).
    pub subject_alt_names: Vec<SubjectAltName>,
    /// SHA-256 of the leaf certificate's DER, 64 lower-case hex digits (what
    /// `openssl x509 -fingerprint -sha256` prints, without the colons).
    pub sha256_fingerprint: String,
}

/// One subject alternative name of a client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubjectAltName {
    /// `dNSName`.
    Dns(String),
    /// `uniformResourceIdentifier` (a SPIFFE id, `spiffe://…`, is one).
    Uri(String),
    /// `rfc822Name`.
    Email(String),
    /// `iPAddress`.
    Ip(IpAddr),
}

impl ClientIdentity {
    /// The identity in `der`, a leaf certificate. Never fails: a field that cannot be read is
    /// left empty (the certificate was verified before; its fingerprint is always there).
    pub fn from_certificate(der: &[u8]) -> ClientIdentity {
        let digest = ring::digest::digest(&ring::digest::SHA256, der);
        let mut sha256_fingerprint = String::with_capacity(64);
        for b in digest.as_ref() {
            sha256_fingerprint.push_str(&format!("{b:02x}"));
        }
        let (common_name, subject_alt_names) = read_names(der).unwrap_or_default();
        ClientIdentity {
            common_name,
            subject_alt_names,
            sha256_fingerprint,
        }
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
/// `[0]` explicit: the version of a `TBSCertificate`.
const VERSION: u8 = 0xa0;
/// `[3]` explicit: the extensions of a `TBSCertificate`.
const EXTENSIONS: u8 = 0xa3;
/// 2.5.4.3, `id-at-commonName`.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.29.17, `id-ce-subjectAltName`.
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// The common name and subject alternative names of certificate `der`; `None` if its
/// structure cannot be read.
fn read_names(der: &[u8]) -> Option<(Option<String>, Vec<SubjectAltName>)> {
    let certificate = Der(der).expect(SEQUENCE)?;
    let mut tbs = Der(Der(certificate).expect(SEQUENCE)?);
    // version (optional), serialNumber, signature, issuer, validity, then subject.
    if tbs.next()?.0 == VERSION {
        tbs.next()?;
    }
    for _ in 0..3 {
        tbs.next()?;
    }
    let subject = tbs.expect(SEQUENCE)?;
    let common_name = common_name(subject);
    let mut names = Vec::new();
    // subjectPublicKeyInfo, then optional issuerUniqueID [1], subjectUniqueID [2], extensions [3].
    while let Some((tag, value)) = tbs.next() {
        if tag == EXTENSIONS {
            names = subject_alt_names(value).unwrap_or_default();
        }
    }
    Some((common_name, names))
}

/// The last common name of a `Name` (a sequence of sets of type-and-value sequences).
fn common_name(name: &[u8]) -> Option<String> {
    let mut found = None;
    let mut rdns = Der(name);
    while let Some((SET, rdn)) = rdns.next() {
        let mut attributes = Der(rdn);
        while let Some((SEQUENCE, attribute)) = attributes.next() {
            let mut parts = Der(attribute);
            if parts.expect(OID) == Some(COMMON_NAME) {
                if let Some((tag, text)) = parts.next() {
                    found = Some(directory_string(tag, text));
                }
            }
        }
    }
    found
}

/// A `DirectoryString` as text: BMPString is UTF-16 (big-endian), the others are read as
/// UTF-8 (PrintableString and IA5String are subsets of it).
fn directory_string(tag: u8, bytes: &[u8]) -> String {
    const BMP_STRING: u8 = 0x1e;
    if tag == BMP_STRING {
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        return String::from_utf16_lossy(&units);
    }
    String::from_utf8_lossy(bytes).into_owned()
}

/// The names of the subjectAltName extension among `extensions` (`[3]`'s content).
fn subject_alt_names(extensions: &[u8]) -> Option<Vec<SubjectAltName>> {
    let mut list = Der(Der(extensions).expect(SEQUENCE)?);
    while let Some((SEQUENCE, extension)) = list.next() {
        let mut parts = Der(extension);
        if parts.expect(OID)? != SUBJECT_ALT_NAME {
            continue;
        }
        // extnID, critical (optional BOOLEAN), extnValue.
        let value = loop {
            let (tag, value) = parts.next()?;
            if tag == OCTET_STRING {
                break value;
            }
        };
        let mut general_names = Der(Der(value).expect(SEQUENCE)?);
        let mut names = Vec::new();
        while let Some((tag, value)) = general_names.next() {
            let text = || String::from_utf8_lossy(value).into_owned();
            // Context-specific, primitive: [1] rfc822Name, [2] dNSName, [6] URI, [7] iPAddress.
            let name = match tag {
                0x81 => SubjectAltName::Email(text()),
                0x82 => SubjectAltName::Dns(text()),
                0x86 => SubjectAltName::Uri(text()),
                0x87 => match value.len() {
                    4 => SubjectAltName::Ip(IpAddr::from(<[u8; 4]>::try_from(value).ok()?)),
                    16 => SubjectAltName::Ip(IpAddr::from(<[u8; 16]>::try_from(value).ok()?)),
                    _ => continue,
                },
                _ => continue,
            };
            names.push(name);
        }
        return Some(names);
    }
    Some(Vec::new())
}

/// A reader of consecutive DER elements (tag, content); short-form tags only, as X.509's are.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    /// The next element, or `None` at the end or where the encoding is broken.
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |l, &b| (l << 8) | usize::from(b));
            rest = &rest[n..];
            len
        };
        if rest.len() < len {
            return None;
        }
        let (content, after) = rest.split_at(len);
        self.0 = after;
        Some((tag, content))
    }

    /// The next element's content if its tag is `tag`.
    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        match self.next()? {
            (t, content) if t == tag => Some(content),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_der_gives_no_names_and_no_panic() {
        for der in [
            &b""[..],
            &[0x30],
            &[0x30, 0x85, 1, 2, 3, 4, 5],
            &[0x30, 0x03, 0x30, 0x01],
            &[0x30, 0x82, 0xff, 0xff],
        ] {
            let id = ClientIdentity::from_certificate(der);
            assert_eq!(id.common_name, None);
            assert!(id.subject_alt_names.is_empty());
            assert_eq!(id.sha256_fingerprint.len(), 64);
        }
    }

    proptest::proptest! {
        /// Whatever the bytes (the reader is given only verified certificates, but must not
        /// trust that), reading them ends without a panic; a certificate-shaped prefix gets
        /// the walk past the outer sequences.
        #[test]
        fn any_bytes_are_read_without_a_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            shaped in proptest::prelude::any::<bool>(),
        ) {
            let mut der = Vec::new();
            if shaped {
                der.extend([0x30, 0x82, 0x02, 0x00, 0x30, 0x82, 0x01, 0xf0, 0xa0, 0x03, 0x02, 0x01, 0x02]);
            }
            der.extend(body);
            let id = ClientIdentity::from_certificate(&der);
            proptest::prop_assert_eq!(id.sha256_fingerprint.len(), 64);
        }
    }

    #[test]
    fn the_fingerprint_is_the_sha256_of_the_der() {
        // SHA-256 of the empty input.
        assert_eq!(
            ClientIdentity::from_certificate(b"").sha256_fingerprint,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
