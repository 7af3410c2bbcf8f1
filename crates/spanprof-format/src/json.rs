//! OTLP JSON encoding of profiles (being written).
