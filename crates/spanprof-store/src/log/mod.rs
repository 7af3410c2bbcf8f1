//! Append-only checksummed segment log (being written).
