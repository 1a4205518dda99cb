//! NGINX's choice of a location, against the imported calmcache's choice
//! of a route: a generated table of configs x paths (issue 28, importer
//! mistake 1). Each config's locations each proxy to an origin of their
//! own, so the origin that counts a request tells which location took it;
//! each config runs once in a real NGINX (Debian's /usr/sbin/nginx) and
//! once in calmcache from `calmcache import-nginx`, and every path goes
//! through both. On any difference the whole table is printed.
//!
//! The configs use only what the importer carries today (proxy_pass and
//! locations of every kind, nested), none of `return` or header rules.

use std::fmt::Write as _;
use std::time::Duration;

use calmcache_testkit::{client, Origin};

use super::import_nginx::{imported, nginx_available, start_calm, start_nginx};
use crate::{free_port, scratch};

/// Location configs: `{N}` is the address of origin N (one per location).
const CONFIGS: [(&str, &str); 5] = [
    (
        "top level: exact, ^~, a prefix extending ^~, regex, ~*",
        "location = /exact { proxy_pass http://{0}; }
         location ^~ /static/ { proxy_pass http://{1}; }
         location /static/deep/ { proxy_pass http://{2}; }
         location ~ \\.(css|js)$ { proxy_pass http://{3}; }
         location ~* \\.PNG$ { proxy_pass http://{4}; }
         location /app/ { proxy_pass http://{5}; }
         location / { proxy_pass http://{6}; }",
    ),
    (
        "regex nested in regex (the forum's uploads and avatars)",
        "location ~ ^/uploads/ { proxy_pass http://{0};
           location ~* \\.(png|jpg)$ { proxy_pass http://{1}; } }
         location ~ ^/letter_avatar/ { proxy_pass http://{2}; }
         location ~ \\.png$ { proxy_pass http://{3}; }
         location / { proxy_pass http://{4}; }",
    ),
    (
        "regex and prefix nested in prefix, ^~ with a nested regex",
        "location /a/ { proxy_pass http://{0};
           location ~ \\.css$ { proxy_pass http://{1}; }
           location /a/b/ { proxy_pass http://{2};
             location ~ \\.js$ { proxy_pass http://{3}; } } }
         location ^~ /s/ { proxy_pass http://{4};
           location ~ \\.js$ { proxy_pass http://{5}; } }
         location ~ \\.(js|css)$ { proxy_pass http://{6}; }
         location /a/bc { proxy_pass http://{7}; }
         location = /a/x.css { proxy_pass http://{8}; }
         location / { proxy_pass http://{9}; }",
    ),
    (
        "no location /, case-insensitive prefix regex, regexes nested in regexes",
        "location ~ \\.php$ { proxy_pass http://{0};
           location ~ ^/admin/ { proxy_pass http://{1}; } }
         location ~* ^/API/ { proxy_pass http://{2}; }
         location /img/ { proxy_pass http://{3}; }
         location ~ /thumb/ { proxy_pass http://{4};
           location ~ \\.jpg$ { proxy_pass http://{5}; } }",
    ),
    (
        "^~ nested in a plain prefix, plain nested in ^~",
        "location /m/ { proxy_pass http://{0};
           location ^~ /m/n/ { proxy_pass http://{1}; }
           location ~ \\.js$ { proxy_pass http://{2}; } }
         location ^~ /p/ { proxy_pass http://{3};
           location /p/q/ { proxy_pass http://{4}; } }
         location ~ \\.(js|css|png)$ { proxy_pass http://{5}; }
         location / { proxy_pass http://{6}; }",
    ),
];

/// Path starts and ends, every start with every end.
const STARTS: [&str; 24] = [
    "/",
    "/exact",
    "/exactly",
    "/static/",
    "/static/deep/",
    "/app/",
    "/uploads/",
    "/uploads/sub/",
    "/letter_avatar/",
    "/a/",
    "/a/b/",
    "/a/bc",
    "/s/",
    "/admin/",
    "/API/",
    "/api/",
    "/img/",
    "/m/",
    "/m/n/",
    "/p/",
    "/p/q/",
    "/other/",
    "/thumb/",
    "/x/thumb/",
];
const ENDS: [&str; 9] = [
    "", "f.css", "f.js", "f.png", "F.PNG", "f.jpg", "f.php", "x", "x.css",
];

fn paths() -> Vec<String> {
    let mut paths: Vec<String> = STARTS
        .iter()
        .flat_map(|s| ENDS.iter().map(move |e| format!("{s}{e}")))
        .collect();
    paths.extend(["/exact".into(), "/a/x.css".into()]);
    paths.sort();
    paths.dedup();
    paths
}

/// Which origin a GET of `path` at `base` reached (`-` for none), with
/// the status.
async fn chosen(base: &str, path: &str, origins: &[Origin]) -> String {
    let before: Vec<u64> = origins.iter().map(Origin::hits).collect();
    let resp = client::get_with(http::Method::GET, &format!("{base}{path}"), &[]).await;
    let hit: Vec<usize> = (0..origins.len())
        .filter(|&i| origins[i].hits() != before[i])
        .collect();
    match hit.as_slice() {
        [i] => format!("L{i}"),
        [] => format!("- {}", resp.status.as_u16()),
        more => format!("{more:?}?"),
    }
}

#[tokio::test]
async fn imported_routes_pick_nginxs_location_for_every_path() {
    if !nginx_available() {
        return;
    }
    let paths = paths();
    let mut table = String::new();
    let mut differ = 0;
    for (n, (label, locations)) in CONFIGS.iter().enumerate() {
        let count = locations.matches("proxy_pass").count();
        let mut origins = Vec::new();
        for _ in 0..count {
            origins.push(Origin::start().await);
        }
        let mut site = locations.to_string();
        for (i, o) in origins.iter().enumerate() {
            site = site.replace(&format!("{{{i}}}"), &o.addr().to_string());
        }
        let dir = scratch(&format!("loc-table-{n}"));
        let port = free_port();
        let server = format!("server {{ listen 127.0.0.1:{port}; {site} }}\n");
        let nginx = start_nginx(&dir.join("nginx"), &server, port).await;
        let conf = dir.join("site.conf");
        std::fs::write(&conf, &server).unwrap();
        let cdir = dir.join("calmcache");
        std::fs::create_dir_all(&cdir).unwrap();
        let calm = start_calm(&cdir, &imported(&conf)).await;
        let nginx_base = format!("http://127.0.0.1:{port}");
        let calm_base = format!("http://{}", calm.proxy_addrs[0]);
        writeln!(table, "config {n}: {label}").unwrap();
        for path in &paths {
            let a = chosen(&nginx_base, path, &origins).await;
            let b = chosen(&calm_base, path, &origins).await;
            let mark = if a == b { "" } else { "   <-- differs" };
            differ += usize::from(a != b);
            writeln!(table, "  {path:<22} nginx {a:<8} calmcache {b:<8}{mark}").unwrap();
        }
        calm.shutdown(Duration::from_secs(1)).await;
        drop(nginx);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let pairs = CONFIGS.len() * paths.len();
    assert_eq!(
        differ, 0,
        "{differ} of {pairs} (config, path) pairs differ:\n{table}"
    );
    println!("{pairs} (config, path) pairs, all the same location\n{table}");
}
