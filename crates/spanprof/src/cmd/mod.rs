//! One module per subcommand: its flags (`Args`) and its `run`.

pub mod check;
pub mod convert;
pub mod flame;
pub mod import;
pub mod inspect;
pub mod serve;
