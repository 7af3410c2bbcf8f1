//! Reading inputs and the flags every command shares: link keys and size limits.

use std::path::{Path, PathBuf};

use anyhow::Context;
use spanprof_format::detect::{decode_input_with_labels, Input};
use spanprof_format::gzip::DEFAULT_MAX_DECOMPRESSED;
use spanprof_format::jfr::LabelsSnapshot;
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, ProfilesData, Resource};
use spanprof_format::{Batch, ConversionReport, FormatError, LinkConfig};

/// How ids on samples become span links.
#[derive(clap::Args, Debug, Clone)]
pub struct LinkArgs {
    /// Attribute/label key holding a span id (16 hex chars); repeat for several. Replaces the
    /// defaults otel.profile.span_id, span_id, profile_id.
    #[arg(long = "span-id-key", value_name = "KEY")]
    span_id_keys: Vec<String>,
    /// Attribute/label key holding a trace id (32 hex chars); repeat for several. Replaces the
    /// defaults otel.profile.trace_id, trace_id.
    #[arg(long = "trace-id-key", value_name = "KEY")]
    trace_id_keys: Vec<String>,
    /// Attribute/label key holding a span name; repeat for several. Replaces the defaults
    /// otel.profile.span_name, span_name.
    #[arg(long = "span-name-key", value_name = "KEY")]
    span_name_keys: Vec<String>,
    /// Keep the id labels on samples after linking (by default the link carries them, and
    /// pprof made from it labels them `span_id`/`trace_id`). To get a pprof's own id labels
    /// (key and case) back after a round trip, give it to both legs: `convert
    /// --keep-link-attributes a.pb.gz -o a.otlp`, then `convert --keep-link-attributes a.otlp
    /// -o b.pb.gz`.
    #[arg(long)]
    keep_link_attributes: bool,
    /// Largest decompressed input accepted, e.g. 64MiB (at least 1 byte).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_max_decompressed)]
    pub max_decompressed: usize,
    /// Set the resource attribute service.name on profiles converted from pprof.
    #[arg(long = "service-name", value_name = "NAME")]
    service_name: Option<String>,
    /// For JFR inputs: the labels snapshot (LabelsSnapshot protobuf, gzip or not) that the
    /// Pyroscope Java agent uploads beside a recording, giving each contextId its labels
    /// (profile_id and span_name link samples to spans).
    #[arg(long = "labels", value_name = "FILE")]
    labels: Option<PathBuf>,
}

impl LinkArgs {
    pub fn config(&self) -> LinkConfig {
        let mut c = LinkConfig::default();
        if !self.span_id_keys.is_empty() {
            c.span_id_keys = self.span_id_keys.clone();
        }
        if !self.trace_id_keys.is_empty() {
            c.trace_id_keys = self.trace_id_keys.clone();
        }
        if !self.span_name_keys.is_empty() {
            c.span_name_keys = self.span_name_keys.clone();
        }
        c.keep_link_attributes = self.keep_link_attributes;
        c
    }

    /// The `--labels` snapshot, read and decoded.
    pub fn labels_snapshot(&self) -> anyhow::Result<Option<LabelsSnapshot>> {
        let Some(path) = &self.labels else {
            return Ok(None);
        };
        let bytes = read(path, self.max_decompressed)?;
        let raw = spanprof_format::gzip::maybe_gunzip(&bytes, self.max_decompressed)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        LabelsSnapshot::decode_snapshot(&raw)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// The resource of a profile of kind `metric` (`process_cpu`, `memory`, …) from JFR.
    pub fn jfr_resource(&self, metric: &str) -> Resource {
        let mut r = self.resource();
        r.attributes.push(KeyValue {
            key: spanprof_store::store::PROFILE_NAME_ATTRIBUTE.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(metric.to_owned())),
            }),
            ..Default::default()
        });
        r
    }

    pub fn resource(&self) -> Resource {
        let mut r = Resource::default();
        if let Some(name) = &self.service_name {
            r.attributes.push(KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(name.clone())),
                }),
                ..Default::default()
            });
        }
        r
    }
}

impl Default for LinkArgs {
    fn default() -> Self {
        LinkArgs {
            span_id_keys: Vec::new(),
            trace_id_keys: Vec::new(),
            span_name_keys: Vec::new(),
            keep_link_attributes: false,
            max_decompressed: DEFAULT_MAX_DECOMPRESSED,
            service_name: None,
            labels: None,
        }
    }
}

/// `--max-decompressed`: a size, not 0 (which would refuse every input).
pub fn parse_max_decompressed(s: &str) -> Result<usize, String> {
    match crate::units::parse_size(s)? {
        0 => Err("0 bytes would refuse every input; give a size such as 256MiB".into()),
        n => Ok(n),
    }
}

/// Reads a profile file (or standard input for `-`) of at most `max_decompressed` bytes (the
/// largest profile decoded, compressed or not): a device or a huge file given by mistake
/// (`/dev/zero`) is an error, not a read until memory runs out.
pub fn read(path: &Path, max_decompressed: usize) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let name = if path == Path::new("-") {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    };
    let source: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("cannot read {name}"))?)
    };
    // A gzip stream is a little larger than its content when that does not compress.
    let limit = max_decompressed.saturating_add(max_decompressed / 64 + 1024);
    let mut buf = Vec::new();
    source
        .take((limit as u64).saturating_add(1))
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read {name}"))?;
    if buf.len() > limit {
        anyhow::bail!(
            "{name} is larger than a profile may be ({} bytes; --max-decompressed sets it)",
            max_decompressed
        );
    }
    Ok(buf)
}

/// Decodes one file of any supported kind (a JFR recording with `labels`).
pub fn decode(
    path: &Path,
    max_decompressed: usize,
    labels: Option<&LabelsSnapshot>,
) -> anyhow::Result<Input> {
    let bytes = read(path, max_decompressed)?;
    decode_bytes_with(&bytes, max_decompressed, labels)
        .with_context(|| format!("{}", path.display()))
}

/// Decodes the bytes of a file of any supported kind; past the size limit, the error says
/// which flag raises it.
pub fn decode_bytes(bytes: &[u8], max_decompressed: usize) -> anyhow::Result<Input> {
    decode_bytes_with(bytes, max_decompressed, None)
}

fn decode_bytes_with(
    bytes: &[u8],
    max_decompressed: usize,
    labels: Option<&LabelsSnapshot>,
) -> anyhow::Result<Input> {
    decode_input_with_labels(bytes, max_decompressed, labels).map_err(|e| {
        let hint = match e {
            FormatError::TooLarge { .. } => " (--max-decompressed raises the limit)",
            _ => "",
        };
        anyhow::anyhow!("{e}{hint}")
    })
}

/// Decodes every input and merges them into one linked `ProfilesData`.
pub fn load_linked(
    paths: &[PathBuf],
    link: &LinkArgs,
) -> anyhow::Result<(ProfilesData, ConversionReport)> {
    load_linked_seeing(paths, link, |_, _| {})
}

/// [`load_linked`], showing each input to `seen` as it is decoded (each is read once:
/// standard input cannot be read again).
pub fn load_linked_seeing(
    paths: &[PathBuf],
    link: &LinkArgs,
    mut seen: impl FnMut(&Path, &Input),
) -> anyhow::Result<(ProfilesData, ConversionReport)> {
    if paths.iter().filter(|p| *p == Path::new("-")).count() > 1 {
        anyhow::bail!("standard input (-) can be given once");
    }
    let labels = link.labels_snapshot()?;
    let mut batch = Batch::new(Some(link.config()));
    for path in paths {
        let input = decode(path, link.max_decompressed, labels.as_ref())?;
        seen(path, &input);
        add_input(&mut batch, input, link).with_context(|| format!("{}", path.display()))?;
    }
    Ok(batch.finish())
}

/// Adds a decoded input to `batch`: a JFR recording's profiles each under its Pyroscope name.
pub fn add_input(batch: &mut Batch, input: Input, link: &LinkArgs) -> Result<(), FormatError> {
    match input {
        Input::Pprof(p) => batch.add_pprof(&p, link.resource()),
        Input::Otlp(d) => batch.add_profiles_data(&d),
        Input::Jfr(profiles, _) => profiles
            .iter()
            .try_for_each(|p| batch.add_pprof(&p.profile, link.jfr_resource(p.kind.metric()))),
    }
}

/// Writes `bytes` to the file `path` whole or not at all: into a temporary file beside it,
/// renamed over it once written, so that a failed write (a full disk) leaves what was there.
pub fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("cannot write {}: not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write {}", path.display()))
}

/// Writes to standard output; a reader that went away (`spanprof inspect | head`) is not an
/// error.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing standard output"),
    }
}
