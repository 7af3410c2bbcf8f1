//! The bytes of a segment file: file header, record framing and checksums, file naming, and a
//! buffered positional reader that walks records without moving any shared file cursor.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::LogError;

/// Magic bytes at the start of every segment file.
pub(super) const FILE_MAGIC: [u8; 8] = *b"SPANSEG1";
/// Version of the layout below; a file with another version is refused, never guessed at.
pub(super) const FORMAT_VERSION: u32 = 1;
/// `magic[8] ‖ version u32 ‖ segment id u64 ‖ crc32 of the previous 20 bytes u32`, in bytes.
/// This layout is kept by every future version; the version decides how records are read.
pub(super) const FILE_HEADER_LEN: u64 = 24;
/// First bytes of every record; non-ASCII so text payloads rarely contain it, which keeps the
/// resynchronisation search after damage cheap.
pub(super) const RECORD_MAGIC: [u8; 4] = [0xD7, 0x1E, 0xC0, 0x5A];
/// `magic[4] ‖ payload length u32 ‖ crc32 u32`, in bytes.
pub(super) const RECORD_HEADER_LEN: u64 = 12;
/// Largest accepted record payload, in bytes (256 MiB).
pub const MAX_RECORD_LEN: u32 = 256 << 20;

/// How much a [`SegmentReader`] reads ahead per positioned read, in bytes.
const READ_CHUNK: usize = 256 << 10;

/// `{id:016x}.seg`.
pub(super) fn file_name(id: u64) -> String {
    format!("{id:016x}.seg")
}

/// The segment id of a file named `{id:016x}.seg` (lower-case hex), else `None`.
pub(super) fn parse_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".seg")?;
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if hex.len() != 16 || !hex.bytes().all(lower_hex) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

pub(super) fn file_header(id: u64) -> [u8; FILE_HEADER_LEN as usize] {
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[..8].copy_from_slice(&FILE_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&id.to_le_bytes());
    let crc = crc32(&[&h[..20]]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a file's header is not the header of segment `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HeaderFault {
    /// Shorter than a header, or all zeros: a file whose creation never completed.
    Unwritten,
    BadMagic,
    Version(u32),
    Checksum,
    WrongId(u64),
}

impl fmt::Display for HeaderFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderFault::Unwritten => f.write_str("file header missing or zero-filled"),
            HeaderFault::BadMagic => f.write_str("not a segment file (bad magic)"),
            HeaderFault::Version(v) => write!(f, "unsupported format version {v}"),
            HeaderFault::Checksum => f.write_str("file header checksum mismatch"),
            HeaderFault::WrongId(id) => write!(f, "header names segment {id:016x}"),
        }
    }
}

/// Checks the first bytes of a file (up to [`FILE_HEADER_LEN`]) against segment `id`.
pub(super) fn check_file_header(bytes: &[u8], id: u64) -> Result<(), HeaderFault> {
    if bytes.len() < FILE_HEADER_LEN as usize || bytes.iter().all(|&b| b == 0) {
        return Err(HeaderFault::Unwritten);
    }
    if bytes[..8] != FILE_MAGIC {
        return Err(HeaderFault::BadMagic);
    }
    // The checksum comes first so a damaged version field reads as damage, not as a newer
    // format that would refuse the whole log.
    if crc32(&[&bytes[..20]]) != u32::from_le_bytes(bytes[20..24].try_into().unwrap()) {
        return Err(HeaderFault::Checksum);
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(HeaderFault::Version(version));
    }
    let found = u64::from_le_bytes(bytes[12..20].try_into().unwrap());
    if found != id {
        return Err(HeaderFault::WrongId(found));
    }
    Ok(())
}

pub(super) fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = flate2::Crc::new();
    for part in parts {
        crc.update(part);
    }
    crc.sum()
}

/// The checksum of a record binds the payload to its length and to its place (segment id and
/// offset), so a stale or misplaced copy of a valid record never verifies.
fn record_crc(segment: u64, offset: u64, payload: &[u8]) -> u32 {
    let len = payload.len() as u32;
    crc32(&[
        &segment.to_le_bytes(),
        &offset.to_le_bytes(),
        &len.to_le_bytes(),
        payload,
    ])
}

/// The record header for `payload` written at `offset` of segment `segment`.
pub(super) fn record_header(
    segment: u64,
    offset: u64,
    payload: &[u8],
) -> [u8; RECORD_HEADER_LEN as usize] {
    let mut h = [0u8; RECORD_HEADER_LEN as usize];
    h[..4].copy_from_slice(&RECORD_MAGIC);
    h[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[8..12].copy_from_slice(&record_crc(segment, offset, payload).to_le_bytes());
    h
}

/// Why the bytes at an offset are not an intact record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BadRecord {
    /// Fewer than [`RECORD_HEADER_LEN`] bytes left before the end.
    ShortHeader,
    BadMagic,
    /// Length field above [`MAX_RECORD_LEN`].
    TooLong(u32),
    /// Length field points past the end of the readable bytes.
    PastEnd(u32),
    Checksum,
    /// The caller's expected length differs from the stored one.
    LengthMismatch {
        stored: u32,
        expected: u32,
    },
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRecord::ShortHeader => f.write_str("record header cut short"),
            BadRecord::BadMagic => f.write_str("no record magic"),
            BadRecord::TooLong(n) => write!(f, "length field {n} exceeds {MAX_RECORD_LEN}"),
            BadRecord::PastEnd(n) => write!(f, "record of {n} bytes runs past the end"),
            BadRecord::Checksum => f.write_str("checksum mismatch"),
            BadRecord::LengthMismatch { stored, expected } => {
                write!(f, "stored length {stored}, expected {expected}")
            }
        }
    }
}

/// Verifies `bytes` (header and payload of a record read at `offset`) and returns the payload.
pub(super) fn verify_record(segment: u64, offset: u64, bytes: &[u8]) -> Result<&[u8], BadRecord> {
    let header_len = RECORD_HEADER_LEN as usize;
    if bytes.len() < header_len {
        return Err(BadRecord::ShortHeader);
    }
    if bytes[..4] != RECORD_MAGIC {
        return Err(BadRecord::BadMagic);
    }
    let len = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    if len > MAX_RECORD_LEN {
        return Err(BadRecord::TooLong(len));
    }
    let payload = bytes
        .get(header_len..header_len + len as usize)
        .ok_or(BadRecord::PastEnd(len))?;
    let stored = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if stored != record_crc(segment, offset, payload) {
        return Err(BadRecord::Checksum);
    }
    Ok(payload)
}

/// Reads a file with positioned reads through a read-ahead buffer, never past `end`.
pub(super) struct SegmentReader<'f> {
    file: &'f File,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl<'f> SegmentReader<'f> {
    pub(super) fn new(file: &'f File, end: u64) -> Self {
        SegmentReader {
            file,
            end,
            buf: Vec::new(),
            buf_start: 0,
        }
    }

    /// Up to `n` bytes at `offset` (fewer at the end of the readable bytes).
    pub(super) fn bytes(&mut self, offset: u64, n: usize) -> io::Result<&[u8]> {
        let n = n.min(self.end.saturating_sub(offset) as usize);
        let buffered =
            offset >= self.buf_start && offset + n as u64 <= self.buf_start + self.buf.len() as u64;
        if !buffered {
            let want = n
                .max(READ_CHUNK)
                .min(self.end.saturating_sub(offset) as usize);
            self.buf.resize(want, 0);
            let mut filled = 0;
            while filled < want {
                match self
                    .file
                    .read_at(&mut self.buf[filled..], offset + filled as u64)
                {
                    Ok(0) => break,
                    Ok(k) => filled += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            // The file may be shorter than `end` claimed (changed underneath us).
            self.buf.truncate(filled);
            self.buf_start = offset;
        }
        let at = (offset - self.buf_start) as usize;
        let n = n.min(self.buf.len() - at);
        Ok(&self.buf[at..at + n])
    }

    /// The record at `offset` of segment `segment`: its payload, or why it is not intact.
    pub(super) fn record(
        &mut self,
        segment: u64,
        offset: u64,
    ) -> io::Result<Result<&[u8], BadRecord>> {
        let header = self.bytes(offset, RECORD_HEADER_LEN as usize)?;
        if header.len() < RECORD_HEADER_LEN as usize {
            return Ok(Err(BadRecord::ShortHeader));
        }
        let len = u32::from_le_bytes(header[4..8].try_into().unwrap());
        let whole = RECORD_HEADER_LEN as usize + len.min(MAX_RECORD_LEN) as usize;
        let bytes = self.bytes(offset, whole)?;
        Ok(verify_record(segment, offset, bytes))
    }

    /// The offset of the first intact record of `segment` at or after `from`, found by looking
    /// for the record magic and verifying each candidate.
    pub(super) fn next_record(&mut self, segment: u64, from: u64) -> io::Result<Option<u64>> {
        let magic_len = RECORD_MAGIC.len();
        let mut at = from;
        while at < self.end {
            let window = self.bytes(at, READ_CHUNK)?;
            if window.len() < magic_len {
                return Ok(None);
            }
            match window.windows(magic_len).position(|w| w == RECORD_MAGIC) {
                Some(i) => {
                    let candidate = at + i as u64;
                    if self.record(segment, candidate)?.is_ok() {
                        return Ok(Some(candidate));
                    }
                    at = candidate + 1;
                }
                // The last magic_len - 1 bytes may start a magic that continues past the window.
                None => at += (window.len() - (magic_len - 1)) as u64,
            }
        }
        Ok(None)
    }
}

pub(super) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Makes a created, renamed or deleted directory entry durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// Writes the file header and `first_record` at the start of `file` (cutting anything after
/// them) and syncs it. Returns the end offset in bytes.
pub(super) fn write_fresh(
    file: &File,
    path: &Path,
    id: u64,
    first_record: &[u8],
) -> Result<u64, LogError> {
    let mut bytes = Vec::with_capacity(FILE_HEADER_LEN as usize + 12 + first_record.len());
    bytes.extend_from_slice(&file_header(id));
    bytes.extend_from_slice(&record_header(id, FILE_HEADER_LEN, first_record));
    bytes.extend_from_slice(first_record);
    file.set_len(0)
        .and_then(|()| file.write_all_at(&bytes, 0))
        .and_then(|()| file.sync_all())
        .map_err(io_error(path))?;
    Ok(bytes.len() as u64)
}

/// Creates segment `id` in `dir` holding `first_record`, durable (file and directory synced)
/// when this returns. On failure the partial file is removed (best effort).
pub(super) fn create(
    dir: &Path,
    id: u64,
    first_record: &[u8],
) -> Result<(File, PathBuf, u64), LogError> {
    let path = dir.join(file_name(id));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io_error(&path))?;
    let written = write_fresh(&file, &path, id, first_record).and_then(|end| {
        sync_dir(dir)?;
        Ok(end)
    });
    match written {
        Ok(end) => Ok((file, path, end)),
        Err(e) => {
            drop(file);
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}
