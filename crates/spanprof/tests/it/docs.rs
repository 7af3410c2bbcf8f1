//! The documentation: `docs/configuration.md` holds what `spanprof serve --config-example`
//! prints (`UPDATE_DOCS=1 cargo test -p spanprof --test it docs::` rewrites it), and every relative
//! link of README.md and docs/ leads to a file and, with `#anchor`, to a heading in it.

use spanprof_testkit as support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- BEGIN generated from `spanprof serve --config-example`: UPDATE_DOCS=1 cargo test -p spanprof --test it docs:: -->";
const END: &str = "<!-- END generated -->";

/// `docs/configuration.md` between its markers is the key table and the example file made from
/// what the binary prints, so the two cannot drift.
#[test]
fn configuration_md_is_the_config_example() {
    let run = support::spanprof(["serve", "--config-example"]);
    run.assert_success();
    let path = support::workspace_root().join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("{} has no `{BEGIN}` … `{END}` markers", path.display());
    };
    let want = format!(
        "{}{BEGIN}\n{}{}",
        &doc[..b],
        generated(&run.stdout),
        &doc[e..]
    );
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    } else if doc != want {
        panic!(
            "{} differs from `spanprof serve --config-example`: run \
             UPDATE_DOCS=1 cargo test -p spanprof --test it docs::\n--- wanted ---\n{want}",
            path.display()
        );
    }
}

/// The table of keys (from the example's uncommented lines, and its examples commented out in
/// the first column), then the example itself.
fn generated(example: &str) -> String {
    // (key, default, note) rows.
    let mut rows: Vec<(String, String, String)> = Vec::new();
    // (indent, key) of the sections the current line is in.
    let mut path: Vec<(usize, String)> = Vec::new();
    // Whether the last line was a key with a note, which a comment line below it continues.
    let mut continues = false;
    // A comment block above a key, at its indent: said of the key (or the keys) below.
    let mut above = String::new();
    for line in example.lines() {
        // `#  retention: 7d`: an example to take up, at the indent it would have.
        let (text, example_only) = match line.strip_prefix('#') {
            Some(rest) if !rest.trim_start().starts_with('#') => (rest, true),
            Some(_) => {
                continues = false;
                above.clear();
                continue;
            }
            None => (line, false),
        };
        let indent = text.len() - text.trim_start().len();
        let body = text.trim_start();
        // A note's second line: a comment aligned far right, below the key's own.
        if let (Some(more), true, false) = (body.strip_prefix('#'), continues, example_only) {
            if indent > 20 {
                let note = &mut rows.last_mut().unwrap().2;
                note.push(' ');
                note.push_str(more.trim());
                continue;
            }
        }
        continues = false;
        if let (Some(comment), false) = (body.strip_prefix('#'), example_only) {
            if !above.is_empty() {
                above.push(' ');
            }
            above.push_str(comment.trim());
            continue;
        }
        if body.is_empty() || body.starts_with('-') || body.starts_with('#') {
            above.clear();
            continue;
        }
        let Some((key, rest)) = body.split_once(':') else {
            continue;
        };
        if !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            continue;
        }
        while path.last().is_some_and(|(i, _)| *i >= indent) {
            path.pop();
        }
        let (value, note) = match rest.split_once(" #") {
            Some((v, n)) => (v.trim(), n.trim()),
            None => (rest.trim(), ""),
        };
        let full = |path: &[(usize, String)]| {
            let mut keys: Vec<&str> = path.iter().map(|(_, k)| k.as_str()).collect();
            keys.push(key);
            keys.join(".")
        };
        // Only a note on the key's own line goes on below it.
        let inline = !note.is_empty();
        let note = match (above.is_empty(), note.is_empty()) {
            (true, _) => note.to_owned(),
            (false, true) => std::mem::take(&mut above),
            (false, false) => format!("{} {note}", std::mem::take(&mut above)),
        };
        if value.is_empty() {
            // A list commented out as a whole (scrape targets, exporters): see the file.
            if example_only {
                let note = note.trim_end_matches("e.g.:");
                let what = note.trim_end_matches([',', ' ']);
                let what = if what.is_empty() { "a list" } else { what };
                rows.push((
                    full(&path),
                    "none".to_owned(),
                    format!("{what}; see the example below"),
                ));
            }
            path.push((indent, key.to_owned()));
            continue;
        }
        // The keys of a list item (a scrape target, an exporter) are in the example below.
        if example_only && indent > 2 {
            continue;
        }
        rows.push(if example_only {
            (full(&path), "none".to_owned(), format!("e.g. `{value}`"))
        } else {
            (full(&path), format!("`{value}`"), note)
        });
        continues = inline;
    }
    let mut out = String::from("| key | default | note |\n|---|---|---|\n");
    for (key, default, note) in rows {
        out.push_str(&format!(
            "| `{key}` | {} | {} |\n",
            default.replace('|', "\\|"),
            note.replace('|', "\\|")
        ));
    }
    out.push_str("\n```yaml\n");
    out.push_str(example);
    out.push_str("```\n");
    out
}

/// Every relative link of README.md and docs/**.md names a file that exists and, with a
/// `#anchor`, a heading of it.
#[test]
fn relative_links_resolve() {
    let root = support::workspace_root();
    let mut files = vec![root.join("README.md")];
    markdown_under(&root.join("docs"), &mut files);
    assert!(files.len() > 5, "found only {files:?}");
    let mut dead = Vec::new();
    let mut anchors: HashMap<PathBuf, Vec<String>> = HashMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for target in links(&text) {
            if let Some(problem) = check_link(file, &target, &mut anchors) {
                dead.push(format!("{}: ({target}): {problem}", file.display()));
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

/// The checker finds what it is for: a missing file, a missing anchor, and passes good ones.
#[test]
fn the_link_checker_finds_dead_links() {
    let dir = support::scratch_dir().join("doc-links");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.md");
    std::fs::write(
        &page,
        "# Title\n\n## Go with `runtime/pprof` labels\n\n## Title\n",
    )
    .unwrap();
    let text = "[a](page.md) [b](page.md#go-with-runtimepprof-labels) [c](page.md#title-1) \
                [d](#title) `[e](gone.md)` [f](gone.md) [g](page.md#nowhere) \
                [h](https://example.com/x)\n```\n[i](gone2.md)\n```\n";
    let found = links(text);
    assert_eq!(
        found,
        [
            "page.md",
            "page.md#go-with-runtimepprof-labels",
            "page.md#title-1",
            "#title",
            "gone.md",
            "page.md#nowhere",
            "https://example.com/x"
        ]
    );
    let mut anchors = HashMap::new();
    let dead: Vec<&str> = found
        .iter()
        .filter(|t| check_link(&page, t, &mut anchors).is_some())
        .map(String::as_str)
        .collect();
    assert_eq!(dead, ["gone.md", "page.md#nowhere"]);
}

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Link targets of `[text](target)` and `![alt](target)` outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans out: `[x](y)` in backticks is not a link.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// Why `target`, linked from `from`, is dead; `None` when it resolves (or is not relative).
fn check_link(
    from: &Path,
    target: &str,
    anchors: &mut HashMap<PathBuf, Vec<String>>,
) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let path = if file.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().unwrap().join(file)
    };
    if !path.exists() {
        return Some(format!("{} does not exist", path.display()));
    }
    let anchor = anchor?;
    let known = anchors
        .entry(path.clone())
        .or_insert_with(|| headings(&std::fs::read_to_string(&path).unwrap_or_default()));
    if known.iter().any(|a| a == anchor) {
        None
    } else {
        Some(format!("no heading #{anchor} in {}", path.display()))
    }
}

/// The anchors GitHub gives a file's headings: lower case, punctuation but `-` and `_` out,
/// spaces to `-`, a repeated one suffixed `-1`, `-2`, ….
fn headings(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.push(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}
