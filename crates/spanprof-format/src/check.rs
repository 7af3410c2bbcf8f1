//! OTLP Profiles conformance checker (being written).
