//! Harness of the server's integration tests beyond the workspace test kit
//! (`spanprof-testkit`: the server in-process, `go tool pprof`): real Go profile data with the
//! answers expected of it, and the push.v1 messages Pyroscope clients send.
#![allow(dead_code)] // each test module uses a different part

pub mod goprofile;
pub mod metrics;
pub mod pushv1;
