//! A file route (`root`, `index`): the request's path opened beneath the
//! root on the blocking pool (`openat2` with `RESOLVE_BENEATH`: no `..`,
//! absolute symlink or symlink that leads out of the root is followed),
//! served with NGINX's validators, preconditions and a single range,
//! streamed in bounded memory. An absent file, or a directory without an
//! index file, is `None`: the request goes on to the next route; with
//! `absent = "404"` it is answered here as NGINX's bare `root` does (404;
//! 403 for a directory without an index file; 301 to `path/` for a
//! directory asked without its slash).
//!
//! Never a directory listing; never a file outside the root; never a read
//! on an async worker.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use calmcache_core::warn_limit::WarnLimit;

use crate::config::answering::{Absent, Files};
use crate::http::body::ResponseBody;
use crate::http::conditional::{self, Precondition};
use crate::http::range::{self, RangePlan};
use crate::http::static_file;

use super::Asked;

/// An open regular file and what its head says.
struct Opened {
    file: File,
    /// The name it was found under (its type comes from it).
    name: PathBuf,
    len: u64,
    modified: SystemTime,
}

/// What looking for a request's file found.
enum Found {
    File(Opened),
    /// No file (nor directory) of that name.
    Absent,
    /// A directory, asked without its trailing slash.
    Directory,
    /// A directory asked with its slash, none of whose index files is there.
    NoIndex,
    /// A path that must not be served (or could not be): this status.
    Refused(StatusCode),
}

/// The answer for `asked` from `files`, or `None` when there is no file.
pub(super) async fn serve(files: &Files, asked: &Asked<'_>) -> Option<Response<ResponseBody>> {
    let below = match static_file::below(asked.path()) {
        Ok(below) => below,
        Err(why) => {
            tracing::debug!(path = asked.path(), why, "file path refused");
            return Some(super::plain(StatusCode::BAD_REQUEST));
        }
    };
    let root = files.root.clone();
    let index = files.index.clone();
    let found = tokio::task::spawn_blocking(move || find(&root, &below, &index)).await;
    let opened = match found {
        Ok(Found::File(opened)) => opened,
        Ok(Found::Absent | Found::Directory | Found::NoIndex) if files.absent == Absent::Next => {
            return None
        }
        Ok(Found::Absent) => return Some(super::plain(StatusCode::NOT_FOUND)),
        Ok(Found::NoIndex) => return Some(super::plain(StatusCode::FORBIDDEN)),
        Ok(Found::Directory) => return Some(with_slash(asked)),
        Ok(Found::Refused(status)) => return Some(super::plain(status)),
        Err(_) => return Some(super::plain(StatusCode::INTERNAL_SERVER_ERROR)),
    };
    if *asked.method != Method::GET && *asked.method != Method::HEAD {
        let mut resp = super::plain(StatusCode::METHOD_NOT_ALLOWED);
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Some(resp);
    }
    Some(respond(opened, asked))
}

/// The file for `below` under `root` (a directory's first index file).
fn find(root: &Path, below: &static_file::Below, index: &[String]) -> Found {
    let dir = match rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(e) => {
            static ROOT: WarnLimit = WarnLimit::new();
            calmcache_core::warn_limited!(ROOT, "file route root cannot be opened",
                root = %root.display(), error = %e);
            return Found::Absent;
        }
    };
    if !below.directory {
        return open_beneath(&dir, &below.path);
    }
    for name in index {
        match open_beneath(&dir, &below.path.join(name)) {
            Found::Absent | Found::Directory | Found::NoIndex => continue,
            found => return found,
        }
    }
    // No index file: is the directory itself there (NGINX's 403) or not (404)?
    match open_beneath(&dir, &below.path) {
        Found::Directory => Found::NoIndex,
        Found::File(_) | Found::Absent | Found::NoIndex => Found::Absent,
        refused @ Found::Refused(_) => refused,
    }
}

/// NGINX's answer to a directory asked without its slash: 301 to the path
/// with it (relative, with the query), NGINX's page as the body.
fn with_slash(asked: &Asked<'_>) -> Response<ResponseBody> {
    let mut resp = super::plain(StatusCode::MOVED_PERMANENTLY);
    // One leading slash: `//host/dir` (merge_slashes = false) would send
    // the client to another host.
    let (path, query) = match asked.path_and_query.split_once('?') {
        Some((path, query)) => (path.trim_start_matches('/'), Some(query)),
        None => (asked.path_and_query.trim_start_matches('/'), None),
    };
    let location = match query {
        Some(query) => format!("/{path}/?{query}"),
        None => format!("/{path}/"),
    };
    // The path was admitted by the edge (no byte a field cannot carry);
    // without a Location the 301 still says what happened.
    if let Ok(value) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(header::LOCATION, value);
    }
    resp
}

/// Opens `path` beneath `dir`; a directory or a missing file is absent.
fn open_beneath(dir: &rustix::fd::OwnedFd, path: &Path) -> Found {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    // NONBLOCK: a FIFO under the root must not hang a blocking thread.
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let fd = match rustix::fs::openat2(dir, path, flags, Mode::empty(), how) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG) => return Found::Absent,
        // Out of the root (a symlink, `..`), or a symlink loop.
        Err(Errno::XDEV | Errno::LOOP) => return Found::Refused(StatusCode::NOT_FOUND),
        Err(Errno::ACCESS) => return Found::Refused(StatusCode::FORBIDDEN),
        // A file's mode gives EACCES; EPERM is mostly a seccomp profile
        // that refuses openat2 itself (every file then answers 403): said.
        Err(Errno::PERM) => {
            static PERM: WarnLimit = WarnLimit::new();
            calmcache_core::warn_limited!(PERM, "file route open refused (EPERM: a seccomp \
                profile that refuses openat2 refuses every file)", path = %path.display());
            return Found::Refused(StatusCode::FORBIDDEN);
        }
        Err(e) => {
            static OPEN: WarnLimit = WarnLimit::new();
            calmcache_core::warn_limited!(OPEN, "file route open failed",
                path = %path.display(), error = %e);
            return Found::Refused(StatusCode::INTERNAL_SERVER_ERROR);
        }
    };
    let file = File::from(fd);
    let Ok(meta) = file.metadata() else {
        return Found::Refused(StatusCode::INTERNAL_SERVER_ERROR);
    };
    if meta.is_dir() {
        return Found::Directory;
    }
    if !meta.is_file() {
        return Found::Refused(StatusCode::NOT_FOUND);
    }
    Found::File(Opened {
        file,
        name: path.to_path_buf(),
        len: meta.len(),
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    })
}

/// The answer from an open file: 304 / 412 for preconditions, a single
/// range as 206 (several: the whole file, as a 200), 416, or the file.
fn respond(opened: Opened, asked: &Asked<'_>) -> Response<ResponseBody> {
    let mut headers = HeaderMap::new();
    let content_type = static_file::content_type(&opened.name);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let validators = [
        (
            header::LAST_MODIFIED,
            static_file::last_modified(opened.modified),
        ),
        (header::ETAG, static_file::etag(opened.modified, opened.len)),
    ];
    for (name, value) in validators {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let fields = asked.headers;
    match conditional::evaluate(fields, &headers) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            conditional::not_modified_headers(&mut headers);
            return with(StatusCode::NOT_MODIFIED, headers, ResponseBody::empty());
        }
        Precondition::Failed => return super::plain(StatusCode::PRECONDITION_FAILED),
    }
    let len = opened.len;
    let (status, start, count) = match range::plan(fields, &headers, len) {
        RangePlan::Single(r) => {
            let value = range::content_range_of(r, Some(len));
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(header::CONTENT_RANGE, value);
            }
            (StatusCode::PARTIAL_CONTENT, r.start, r.end - r.start + 1)
        }
        RangePlan::Unsatisfiable => {
            let status = range::unsatisfiable(&mut headers, len);
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
            return with(status, headers, ResponseBody::empty());
        }
        RangePlan::Full | RangePlan::Multi(_) => (StatusCode::OK, 0, len),
    };
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(count));
    let body = if *asked.method == Method::HEAD || count == 0 {
        ResponseBody::empty()
    } else {
        crate::http::file_body::open_file_body(Arc::new(opened.file), start, count)
    };
    with(status, headers, body)
}

fn with(status: StatusCode, headers: HeaderMap, body: ResponseBody) -> Response<ResponseBody> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}
