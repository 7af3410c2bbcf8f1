//! Label matchers (being written).
