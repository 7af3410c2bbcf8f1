//! Opening a log directory: listing its segment files, verifying every record, cutting the torn
//! tail of the active segment and reporting everything else that is wrong.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::segment::{
    self, io_error, BadRecord, HeaderFault, SegmentReader, FILE_HEADER_LEN, RECORD_HEADER_LEN,
};
use super::{check_len, FirstRecord, LogError, RecoveryReport, Segment, Writer};

/// The state of a directory after recovery, ready to become a [`super::Log`].
pub(super) struct Recovered {
    /// All segments of the log, oldest first, the active one last.
    pub(super) segments: Vec<Arc<Segment>>,
    pub(super) writer: Writer,
    pub(super) report: RecoveryReport,
}

/// What a file in the directory turned out to be.
enum Found {
    /// A segment with at least one intact record.
    Segment(Walk),
    /// What a crashed creation leaves: no complete header and first record.
    Unfinished,
    /// Not a segment of this log; left alone.
    Foreign(HeaderFault),
}

// Long: one ordered decision over every segment file; split, the order of its cases is harder to check.
#[allow(clippy::too_many_lines)]
pub(super) fn recover(dir: &Path, first_record: &FirstRecord) -> Result<Recovered, LogError> {
    create_dir(dir)?;
    let mut report = RecoveryReport::default();
    let files = list(dir, &mut report.problems)?;
    let mut found = Vec::with_capacity(files.len());
    for (id, path) in &files {
        let file = File::open(path).map_err(io_error(path))?;
        let len = file.metadata().map_err(io_error(path))?.len();
        found.push((len, classify(&file, *id, len, path)?));
    }
    // The newest segment is the active one; anything unfinished after it is a creation (first
    // open or rotation) that crashed before it returned, so it holds nothing acknowledged.
    let newest = found
        .iter()
        .rposition(|(_, f)| matches!(f, Found::Segment(_)));
    let mut segments = Vec::new();
    let mut active = None;
    let mut removed = false;
    for (i, ((id, path), (len, found))) in files.iter().zip(found).enumerate() {
        let (id, shown) = (*id, path.display());
        let walk = match found {
            Found::Segment(walk) => walk,
            Found::Unfinished if newest.is_none_or(|n| i > n) => {
                fs::remove_file(path).map_err(io_error(path))?;
                report.truncated_bytes += len;
                removed = true;
                continue;
            }
            Found::Unfinished => {
                // Only the newest file can be left unfinished by a crash; this one is older.
                report
                    .problems
                    .push(format!("{shown}: holds no intact record; file ignored"));
                continue;
            }
            Found::Foreign(fault) => {
                report
                    .problems
                    .push(format!("{shown}: {fault}; file ignored"));
                continue;
            }
        };
        report.records += walk.records;
        let mut damaged = Vec::with_capacity(walk.damaged.len() + 1);
        for (range, bad) in walk.damaged {
            let (start, end) = (range.start, range.end);
            report.problems.push(format!(
                "{shown}: damaged record at offset {start} ({bad}); bytes {start}..{end} \
                 skipped, the intact records after them kept"
            ));
            report.damaged_bytes += end - start;
            damaged.push(range);
        }
        let is_active = Some(i) == newest;
        let mut end = len;
        if let Some((start, bad)) = walk.tail {
            if is_active {
                // Nothing intact follows: a write that never completed, so never acknowledged.
                cut(path, start)?;
                report.truncated_bytes += len - start;
                end = start;
            } else {
                report.problems.push(format!(
                    "{shown}: damaged record at offset {start} ({bad}); bytes {start}..{len} at \
                     the end of a sealed segment skipped"
                ));
                report.damaged_bytes += len - start;
                damaged.push(start..len);
            }
        }
        let seg = Segment::new(id, path.clone(), end, damaged);
        segments.push(seg.clone());
        if is_active {
            let file = OpenOptions::new().read(true).write(true).open(path);
            active = Some((seg, file.map_err(io_error(path))?, end));
        }
    }
    if removed {
        segment::sync_dir(dir)?;
    }
    let max_seen = files.last().map(|(id, _)| *id);
    let (segment, file, end) = match active {
        Some(active) => active,
        None => {
            // No segment at all, so no data the first record could describe.
            let id = match max_seen {
                Some(max) => next_id(dir, max)?,
                None => 1,
            };
            let first = first_record(id);
            check_len(first.len())?;
            let (file, path, end) = segment::create(dir, id, &first)?;
            report.records += 1;
            let seg = Segment::new(id, path, end, Vec::new());
            segments.push(seg.clone());
            (seg, file, end)
        }
    };
    let next_id = next_id(dir, max_seen.unwrap_or(0).max(segment.id))?;
    let writer = Writer {
        segment,
        file,
        end,
        next_id,
        failed: None,
    };
    Ok(Recovered {
        segments,
        writer,
        report,
    })
}

fn classify(file: &File, id: u64, len: u64, path: &Path) -> Result<Found, LogError> {
    let mut reader = SegmentReader::new(file, len);
    let header = reader
        .bytes(0, FILE_HEADER_LEN as usize)
        .map_err(io_error(path))?;
    match segment::check_file_header(header, id) {
        Ok(()) => {}
        Err(HeaderFault::Version(found)) => {
            return Err(LogError::UnsupportedVersion {
                path: path.to_path_buf(),
                found,
                supported: segment::FORMAT_VERSION,
            });
        }
        Err(HeaderFault::Unwritten) if unfinished(&mut reader, id, len, path)? => {
            return Ok(Found::Unfinished);
        }
        Err(fault) => return Ok(Found::Foreign(fault)),
    }
    let walk = walk(&mut reader, id, len).map_err(io_error(path))?;
    // The header and the first record are written together: without an intact record the
    // creation never completed.
    Ok(match walk.records {
        0 => Found::Unfinished,
        _ => Found::Segment(walk),
    })
}

/// Cuts the file at `len` bytes, durably.
fn cut(path: &Path, len: u64) -> Result<(), LogError> {
    let file = OpenOptions::new().write(true).open(path);
    file.and_then(|f| f.set_len(len).and_then(|()| f.sync_all()))
        .map_err(io_error(path))
}

/// The id after `id`, or an error once ids are exhausted.
pub(super) fn next_id(dir: &Path, id: u64) -> Result<u64, LogError> {
    id.checked_add(1).ok_or_else(|| LogError::Io {
        path: dir.to_path_buf(),
        source: io::Error::other("segment ids exhausted (a file named ffffffffffffffff.seg?)"),
    })
}

/// Creates the directory if missing, durably (its parent is synced).
fn create_dir(dir: &Path) -> Result<(), LogError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => segment::sync_dir(parent),
        _ => segment::sync_dir(Path::new(".")),
    }
}

/// The segment files of `dir` by id, ascending. Other `*.seg` entries are reported.
fn list(dir: &Path, problems: &mut Vec<String>) -> Result<Vec<(u64, PathBuf)>, LogError> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !name.ends_with(".seg") {
            continue;
        }
        match segment::parse_file_name(&name) {
            Some(id) if path.is_file() => files.push((id, path)),
            Some(_) => problems.push(format!("{}: not a regular file; ignored", path.display())),
            None => problems.push(format!(
                "{}: not a segment file name ({{id:016x}}.seg); ignored",
                path.display()
            )),
        }
    }
    files.sort_unstable();
    Ok(files)
}

/// True when the file is what a crashed creation leaves: shorter than a header and a prefix of
/// the header of segment `id`, or only zeros.
fn unfinished(
    reader: &mut SegmentReader<'_>,
    id: u64,
    len: u64,
    path: &Path,
) -> Result<bool, LogError> {
    let head = reader
        .bytes(0, FILE_HEADER_LEN as usize)
        .map_err(io_error(path))?;
    if len < FILE_HEADER_LEN && segment::file_header(id).starts_with(head) {
        return Ok(true);
    }
    let mut offset = 0;
    while offset < len {
        let chunk = reader.bytes(offset, 1 << 20).map_err(io_error(path))?;
        if chunk.is_empty() {
            break;
        }
        if chunk.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        offset += chunk.len() as u64;
    }
    Ok(true)
}

/// What walking a segment's records found.
struct Walk {
    records: u64,
    /// Damage followed by an intact record: the damaged bytes and why the first one failed.
    damaged: Vec<(Range<u64>, BadRecord)>,
    /// Damage with no intact record after it: where it starts and why.
    tail: Option<(u64, BadRecord)>,
}

fn walk(reader: &mut SegmentReader<'_>, id: u64, len: u64) -> io::Result<Walk> {
    let mut walk = Walk {
        records: 0,
        damaged: Vec::new(),
        tail: None,
    };
    let mut offset = FILE_HEADER_LEN;
    while offset < len {
        match reader.record(id, offset)? {
            Ok(payload) => {
                walk.records += 1;
                offset += RECORD_HEADER_LEN + payload.len() as u64;
            }
            Err(bad) => match reader.next_record(id, offset + 1)? {
                Some(next) => {
                    walk.damaged.push((offset..next, bad));
                    offset = next;
                }
                None => {
                    walk.tail = Some((offset, bad));
                    break;
                }
            },
        }
    }
    Ok(walk)
}
