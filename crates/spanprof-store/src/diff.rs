//! Diff flame graphs (being written).
