//! Spans: records, index, search (being written).
