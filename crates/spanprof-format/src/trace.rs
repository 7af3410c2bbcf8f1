//! OTLP trace wire types (being written).
