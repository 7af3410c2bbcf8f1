//! The client of the request a task serves, set by the listener for the request's task, so
//! that what logs a refused request (metrics, below the listeners) can say who sent it.

tokio::task_local! {
    /// The address of the client whose request the task serves.
    pub(crate) static PEER: std::net::SocketAddr;
}

/// The client of the request being served on this task, if any.
pub fn peer() -> Option<std::net::SocketAddr> {
    PEER.try_with(|p| *p).ok()
}
