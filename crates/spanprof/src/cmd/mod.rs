//! One module per subcommand: its flags (`Args`) and its `run`.

pub mod check;
pub mod convert;
pub mod flame;
pub mod import;
pub mod inspect;
pub mod serve;
pub mod tenant;

/// `e` and its causes, outermost first, joined by `: `; a cause whose text its parent's
/// message already holds (an error that prints its source) is not repeated.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_text;

    /// An error that shows its source in its own message.
    #[derive(Debug)]
    struct Opening(std::io::Error);

    impl std::fmt::Display for Opening {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "/data: {}", self.0)
        }
    }

    impl std::error::Error for Opening {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn causes_are_not_repeated() {
        let io = || std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use");
        let e = anyhow::Error::new(Opening(io())).context("opening the store in /data");
        assert_eq!(
            error_text(&e),
            "opening the store in /data: /data: address in use"
        );
        // Causes that add something are all shown.
        let e = anyhow::Error::new(io()).context("cannot listen on :4040");
        assert_eq!(error_text(&e), "cannot listen on :4040: address in use");
    }
}
