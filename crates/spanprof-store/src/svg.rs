//! A standalone SVG flame graph of a [`FlameTree`]: root at the bottom, widths proportional
//! to totals, one `<title>` tooltip per frame, colours stable per package. No script.
//!
//! Frame names are untrusted input: every piece of text is XML-escaped, and characters that
//! XML 1.0 cannot carry even escaped (most control characters) become U+FFFD.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::flamegraph::{FlameTree, NodeId};

/// How to draw an SVG flame graph. Sizes are in SVG user units (pixels).
#[derive(Clone, Debug, PartialEq)]
pub struct SvgOptions {
    /// Profile type shown in the heading, e.g. `cpu:nanoseconds:cpu:nanoseconds`.
    pub profile_type: String,
    /// Unit of the values, shown in the heading and tooltips, e.g. `nanoseconds`.
    pub unit: String,
    /// Width of the whole image, in pixels.
    pub width_px: u32,
    /// Height of one frame row, in pixels.
    pub frame_height_px: u32,
    /// Frames whose total is below this fraction of the root total (0.001 = 0.1%) are left
    /// out together with their descendants.
    pub min_frame_fraction: f64,
}

impl Default for SvgOptions {
    fn default() -> Self {
        Self {
            profile_type: String::new(),
            unit: String::new(),
            width_px: 1200,
            frame_height_px: 16,
            min_frame_fraction: 0.001,
        }
    }
}

const PAD_SIDE_PX: f64 = 10.0;
const PAD_TOP_PX: f64 = 40.0;
const PAD_BOTTOM_PX: f64 = 10.0;
/// Approximate advance of one character at the 12px label font, in pixels.
const CHAR_WIDTH_PX: f64 = 7.0;

/// `value` in `unit` as people read it: durations in ms or s, bytes in KB or MB (1024s),
/// counts with thousands separated; other units as given.
pub fn readable(value: u64, unit: &str) -> String {
    const TIMES: [(f64, &str); 6] = [
        (3600e9, "h"),
        (60e9, "min"),
        (1e9, "s"),
        (1e6, "ms"),
        (1e3, "µs"),
        (1.0, "ns"),
    ];
    const BYTES: [(f64, &str); 5] = [
        (1_099_511_627_776.0, "TB"),
        (1_073_741_824.0, "GB"),
        (1_048_576.0, "MB"),
        (1024.0, "KB"),
        (1.0, "B"),
    ];
    let scaled = |table: &[(f64, &str)]| {
        let v = value as f64;
        let (size, name) = table
            .iter()
            .find(|(size, _)| v >= *size)
            .unwrap_or(&table[table.len() - 1]);
        let x = v / size;
        let digits = if x >= 100.0 || *size == 1.0 {
            0
        } else if x >= 10.0 {
            1
        } else {
            2
        };
        // As the UI writes them: "50 ms", not "50.0 ms".
        let number = format!("{x:.digits$}");
        let number = if number.contains('.') {
            number.trim_end_matches('0').trim_end_matches('.')
        } else {
            &number
        };
        format!("{number} {name}")
    };
    match unit {
        "nanoseconds" => scaled(&TIMES),
        "bytes" => scaled(&BYTES),
        _ => {
            let digits = value.to_string();
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i).is_multiple_of(3) {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            match unit {
                "" | "count" | "samples" => grouped,
                other => format!("{grouped} {other}"),
            }
        }
    }
}

/// One frame to draw: node, depth (0 = root) and start offset from the left, in value units.
struct Placed {
    node: NodeId,
    depth: usize,
    start: u64,
}

/// Renders `tree` as a standalone SVG document (UTF-8 text).
pub fn render_svg(tree: &FlameTree, options: &SvgOptions) -> String {
    let total = tree.total();
    let placed = place_frames(tree, options.min_frame_fraction);
    let rows = placed.iter().map(|p| p.depth + 1).max().unwrap_or(0);
    let frame_h = f64::from(options.frame_height_px.max(1));
    let width = f64::from(options.width_px.max(1));
    let height = PAD_TOP_PX + rows as f64 * frame_h + PAD_BOTTOM_PX;
    let scale = if total == 0 {
        0.0
    } else {
        (width - 2.0 * PAD_SIDE_PX).max(0.0) / total as f64
    };

    let mut out = String::new();
    let _ = write!(
        out,
        concat!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n",
            "<svg version=\"1.1\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" ",
            "xmlns=\"http://www.w3.org/2000/svg\">\n",
            "<style>text{{font-family:Verdana,sans-serif;font-size:12px;fill:#000}}",
            ".heading{{font-size:17px}}</style>\n",
            "<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#f8f8f8\"/>\n",
        ),
        w = options.width_px.max(1),
        h = height,
    );
    let heading = format!(
        "{} \u{2014} total {}",
        options.profile_type,
        readable(total, &options.unit)
    );
    let _ = writeln!(
        out,
        "<text class=\"heading\" x=\"{}\" y=\"24\" text-anchor=\"middle\">{}</text>",
        width / 2.0,
        escape_xml(heading.trim()),
    );
    for p in &placed {
        let name = tree.node_name(p.node);
        let value = tree.node_total(p.node);
        let x = PAD_SIDE_PX + p.start as f64 * scale;
        let w = value as f64 * scale;
        let y = height - PAD_BOTTOM_PX - (p.depth + 1) as f64 * frame_h;
        let percent = if total == 0 {
            0.0
        } else {
            value as f64 * 100.0 / total as f64
        };
        let tooltip = format!("{name} ({}, {percent:.2}%)", readable(value, &options.unit));
        let (r, g, b) = package_colour(name);
        let _ = write!(
            out,
            "<g><title>{}</title><rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{w:.2}\" \
             height=\"{fh:.2}\" fill=\"rgb({r},{g},{b})\" rx=\"2\"/>",
            escape_xml(&tooltip),
            fh = (frame_h - 1.0).max(1.0),
        );
        if let Some(label) = fit_label(name, w) {
            let _ = write!(
                out,
                "<text x=\"{:.2}\" y=\"{:.2}\">{}</text>",
                x + 3.0,
                y + frame_h - 4.0,
                escape_xml(&label),
            );
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n");
    out
}

/// Frames to draw, in drawing order (parents before children). Children sit left to right
/// in name order starting at their parent's left edge, as in Brendan Gregg's flame graphs.
fn place_frames(tree: &FlameTree, min_fraction: f64) -> Vec<Placed> {
    let total = tree.total();
    if total == 0 {
        return Vec::new();
    }
    let too_narrow = |value: u64| (value as f64) < total as f64 * min_fraction;
    let mut placed = Vec::new();
    let mut stack = vec![Placed {
        node: tree.root(),
        depth: 0,
        start: 0,
    }];
    while let Some(frame) = stack.pop() {
        let mut cursor = frame.start;
        for &child in tree.children(frame.node) {
            let value = tree.node_total(child);
            if !too_narrow(value) {
                stack.push(Placed {
                    node: child,
                    depth: frame.depth + 1,
                    start: cursor,
                });
            }
            cursor = cursor.saturating_add(value);
        }
        placed.push(frame);
    }
    placed
}

/// The label that fits in `width_px`, shortened with `..`; `None` when not even 3 characters fit.
fn fit_label(name: &str, width_px: f64) -> Option<Cow<'_, str>> {
    let fits = ((width_px - 6.0) / CHAR_WIDTH_PX).floor();
    if fits < 3.0 {
        return None;
    }
    let fits = fits as usize;
    if name.chars().count() <= fits {
        return Some(Cow::Borrowed(name));
    }
    let mut short: String = name.chars().take(fits - 2).collect();
    short.push_str("..");
    Some(Cow::Owned(short))
}

/// Escapes `&`, `<`, `>`, `"` and `'` for XML text and attributes, and replaces characters
/// XML 1.0 forbids (control characters other than tab, newline, carriage return) with U+FFFD.
pub fn escape_xml(text: &str) -> Cow<'_, str> {
    let needs_work = |c: char| matches!(c, '&' | '<' | '>' | '"' | '\'') || !xml_char(c);
    if !text.chars().any(needs_work) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if !xml_char(c) => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether XML 1.0 allows `c` in a document.
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
        || c >= '\u{10000}'
}

/// The package part of a frame name, which decides its colour.
///
/// Go: everything up to the first `.` after the last `/` (`net/http.(*conn).serve` →
/// `net/http`; `runtime.main.func1` → `runtime`), since Go package names never contain `.`;
/// Java frames in `java/lang/Thread.run` form give their class. Rust/C++ (`::`): the first
/// path segment (`tokio::runtime::…` → `tokio`). Generic arguments in `[…]` are ignored.
pub fn package_of(name: &str) -> &str {
    let base = name.split('[').next().unwrap_or(name);
    if let Some(crate_end) = base.find("::") {
        return &base[..crate_end];
    }
    let segment_start = base.rfind('/').map_or(0, |i| i + 1);
    match base[segment_start..].find('.') {
        Some(dot) => &base[..segment_start + dot],
        None => base,
    }
}

/// A warm flame colour derived from a stable hash of the name's package: FNV-1a, then a
/// splitmix64 finaliser so that every output byte depends on every input byte.
fn package_colour(name: &str) -> (u8, u8, u8) {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in package_of(name).bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^= hash >> 31;
    let [b0, b1, b2, ..] = hash.to_le_bytes();
    (
        205 + b0 % 50, // 205..=254
        b1 % 230,
        b2 % 55,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_durations_sizes_and_counts() {
        for (value, unit, shown) in [
            (520_000_000, "nanoseconds", "520 ms"),
            (1_250_000_000, "nanoseconds", "1.25 s"),
            (999, "nanoseconds", "999 ns"),
            (0, "nanoseconds", "0 ns"),
            (12_582_912, "bytes", "12 MB"),
            (50_000_000, "nanoseconds", "50 ms"),
            (1_234_567, "count", "1,234,567"),
            (42, "", "42"),
            (1_000, "lines", "1,000 lines"),
        ] {
            assert_eq!(readable(value, unit), shown, "{value} {unit}");
        }
    }

    #[test]
    fn packages() {
        let cases = [
            ("net/http.(*conn).serve", "net/http"),
            (
                "github.com/acme/shop/cart.Checkout",
                "github.com/acme/shop/cart",
            ),
            (
                "github.com/acme/shop/cart.(*Cart).Add.func1",
                "github.com/acme/shop/cart",
            ),
            ("runtime.main.func1", "runtime"),
            ("sync.(*Mutex).Lock", "sync"),
            ("slices.Sort[go.shape.[]int,go.shape.int]", "slices"),
            ("pkg.F[github.com/x/y.T]", "pkg"),
            ("java/lang/Thread.run", "java/lang/Thread"),
            ("tokio::runtime::park", "tokio"),
            ("0x4a3f10", "0x4a3f10"),
            ("main", "main"),
        ];
        for (name, package) in cases {
            assert_eq!(package_of(name), package, "{name}");
        }
        assert_eq!(
            package_colour("net/http.(*conn).serve"),
            package_colour("net/http.HandlerFunc.ServeHTTP")
        );
    }

    #[test]
    fn escapes_all_five_and_forbidden_controls() {
        assert_eq!(
            escape_xml("<a href='x'>\"&\"</a>\u{1}"),
            "&lt;a href=&apos;x&apos;&gt;&quot;&amp;&quot;&lt;/a&gt;\u{FFFD}"
        );
        assert!(matches!(escape_xml("plain.name"), Cow::Borrowed(_)));
    }

    #[test]
    fn labels_fit_by_characters() {
        assert_eq!(fit_label("abcdef", 10.0), None);
        assert_eq!(fit_label("abcdef", 100.0).unwrap(), "abcdef");
        assert_eq!(fit_label("ééééééééé", 6.0 + 7.0 * 5.0).unwrap(), "ééé..");
    }

    #[test]
    fn narrow_frames_are_left_out() {
        let mut t = FlameTree::new();
        t.add(&["wide", "child"], 10_000);
        t.add(&["narrow", "below"], 5);
        let names: Vec<&str> = place_frames(&t, 0.001)
            .iter()
            .map(|p| t.node_name(p.node))
            .collect();
        assert_eq!(names, ["total", "wide", "child"]);
        assert_eq!(place_frames(&t, 0.0).len(), 5);
    }
}
