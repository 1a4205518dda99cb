//! Private files stay private (issue 25, item 9): what calmcache writes
//! into a zone is 0700/0600 whatever the umask, an existing zone directory
//! others can enter is narrowed, and `check` warns about a config every
//! user can read that holds a secret inline.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use calmcache_testkit::Origin;

use crate::{free_port, scratch, serve_after, wait_listening, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Every directory and file under `dir` (itself included), with its mode.
fn tree(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    let mut out = vec![(dir.to_path_buf(), mode(dir), true)];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(tree(&path));
        } else {
            out.push((path.clone(), mode(&path), false));
        }
    }
    out
}

/// Regression: zone directories and files followed the umask (0755/0644
/// with the usual 022, 0777/0666 with 0 here), so cached answers were
/// readable by every user outside the systemd unit. Served with umask 0:
/// a small object, a large streamed one (written as it arrives) and one
/// without a length (spooled), into a new zone directory and into an
/// existing one that was 0777: every directory 0700, every file 0600.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_files_are_private_whatever_the_umask() {
    let base = scratch("private-files");
    let fresh = base.join("cache/fresh");
    let old = base.join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o777)).unwrap();
    let origin = Origin::start().await;
    let port = free_port();
    let config = base.join("calmcache.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\n\
             [upstreams.o]\nservers = [\"{}\"]\n\
             [zones.fresh]\nkind = \"disk\"\npath = \"{}\"\nmax_size = \"64MiB\"\n\
             [zones.old]\nkind = \"disk\"\npath = \"{}\"\nmax_size = \"64MiB\"\n\
             [[routes]]\nname = \"old\"\nmatch = \"^/old/\"\nupstream = \"o\"\nzone = \"old\"\n\
             ttl = {{ 200 = \"1h\" }}\n\
             [[routes]]\nupstream = \"o\"\nzone = \"fresh\"\nttl = {{ 200 = \"1h\" }}\n",
            origin.addr(),
            fresh.display(),
            old.display()
        ),
    )
    .unwrap();
    let log = base.join("serve.log");
    let _child = serve_after("umask 0", &config, &log);
    wait_listening(port).await;
    let paths = [
        "/small?x-origin-body-bytes=100",
        "/large?x-origin-stream-bytes=600000",
        "/spooled?x-origin-trickle-ms=1&x-origin-chunked=1&x-origin-body-bytes=300000",
        "/old/small?x-origin-body-bytes=100",
    ];
    for path in paths {
        let url = format!("http://127.0.0.1:{port}{path}");
        let first = calmcache_testkit::get(&url).await;
        assert_eq!(first.status, 200, "{path}");
    }
    // Stored once a repeat is a hit (the disk write finishes behind the answer).
    for path in paths {
        let url = format!("http://127.0.0.1:{port}{path}");
        let what = format!("{path} stored");
        wait_until(Duration::from_secs(5), &what, async || {
            calmcache_testkit::get(&url)
                .await
                .cache_status()
                .contains("hit")
        })
        .await;
    }
    let mut files = 0;
    for (path, mode, is_dir) in tree(&fresh).into_iter().chain(tree(&old)) {
        let want = if is_dir { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{} is {mode:04o}", path.display());
        files += usize::from(!is_dir);
    }
    // The markers and the four objects at least.
    assert!(files >= 6, "{files} files");
    wait_until(
        Duration::from_secs(5),
        "the narrowing is logged",
        async || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("narrowed to 0700")),
    )
    .await;
    let _ = std::fs::remove_dir_all(&base);
}

fn check(config: &Path) -> String {
    let out = Command::new(BIN)
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `check` warns when a config every user can read holds the admin token,
/// the fleet's password or a Redis URL with a password inline, and says
/// nothing once the file is 0640 or the secrets are in their files.
#[test]
fn check_warns_about_secrets_inline_in_a_world_readable_config() {
    let base = scratch("secret-modes");
    let inline = base.join("inline.toml");
    std::fs::write(
        &inline,
        "[server]\nlisten = [\"127.0.0.1:8080\"]\n\
         [admin]\nlisten = \"127.0.0.1:9090\"\ntoken = \"s3cret-token\"\n\
         [upstreams.o]\nservers = [\"127.0.0.1:8081\"]\n\
         [fleet]\nredis = \"redis://cc:hunter2@127.0.0.1:6379\"\n\
         [[routes]]\nupstream = \"o\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&inline, std::fs::Permissions::from_mode(0o644)).unwrap();
    let warned = check(&inline);
    assert!(
        warned.contains("readable by every user (mode 0644)")
            && warned.contains("admin.token, fleet.redis")
            && warned.contains("token_file"),
        "{warned}"
    );
    // The warning never quotes a secret.
    assert!(
        !warned.contains("s3cret") && !warned.contains("hunter2"),
        "{warned}"
    );
    std::fs::set_permissions(&inline, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(!check(&inline).contains("readable by every user"));

    let token = base.join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let files = base.join("files.toml");
    std::fs::write(
        &files,
        format!(
            "[server]\nlisten = [\"127.0.0.1:8080\"]\n\
             [admin]\nlisten = \"127.0.0.1:9090\"\ntoken_file = \"{}\"\n\
             [upstreams.o]\nservers = [\"127.0.0.1:8081\"]\n[[routes]]\nupstream = \"o\"\n",
            token.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&files, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(!check(&files).contains("readable by every user"));
    let _ = std::fs::remove_dir_all(&base);
}
