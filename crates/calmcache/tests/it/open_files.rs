//! Honest resource accounting (issue 25, item 13): the start-up check of
//! `max_connections` against the open files limit counts every descriptor
//! a connection may hold.

use crate::{free_port, scratch, serve_after, wait_listening};

/// Regression: a spliced connection holds three descriptors (its socket
/// and a pipe's two ends) and may wait for the origin on a fourth, but the
/// check counted two: with `max_connections = 100` under a limit of 500
/// (room for 2 x 100 + 256, not for 4 x 100 + 256) it said nothing, and
/// `accept` failed with EMFILE while the warning had promised room. Run
/// as a process under `ulimit -n 500`: the warning names the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_open_files_limit_is_warned_about_at_four_per_connection() {
    let base = scratch("open-files");
    let (port, origin) = (free_port(), free_port());
    let config = base.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\nmax_connections = 100\n\
             [upstreams.o]\nservers = [\"127.0.0.1:{origin}\"]\n[[routes]]\nupstream = \"o\"\n"
        ),
    )
    .unwrap();
    let log = base.join("serve.log");
    let child = serve_after("ulimit -n 500", &config, &log);
    wait_listening(port).await;
    drop(child);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("cannot fit the open files limit")
            && text.contains("open_files_limit=500")
            && text.contains("needed=656")
            && text.contains("4 descriptors"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
