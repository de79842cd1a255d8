//! Graceful shutdown: on SIGTERM or SIGINT the server stops accepting connections, `/health`
//! answers 503, every admitted request is finished, and the process exits within
//! `--shutdown-timeout-s` (requests still running then are cut off, and counted on stderr).

/// Resolves at the first SIGTERM or SIGINT (Ctrl-C); on other platforms, at Ctrl-C.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                eprintln!("warning: cannot listen for SIGTERM ({e}); only Ctrl-C stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
