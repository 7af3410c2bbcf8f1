//! Shared by the JFR test binaries: a converted sample's stack as text, to compare with what an
//! independent reader (the JDK's `jfr print`, Pyroscope's converter) printed.

use spanprof_format::pprof;

/// Sample `s`'s stack as `Class.method:line;…`, root first.
pub fn stack_text(p: &pprof::Profile, s: &pprof::Sample) -> String {
    let frames: Vec<String> = s
        .location_id
        .iter()
        .rev()
        .map(|&id| {
            let l = p.location.iter().find(|l| l.id == id).expect("location id");
            let f = p
                .function
                .iter()
                .find(|f| f.id == l.line[0].function_id)
                .expect("function id");
            format!("{}:{}", p.string_table[f.name as usize], l.line[0].line)
        })
        .collect();
    frames.join(";")
}
