//! Unit tests of the importer: one per directive mapping, and the errors.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::path::Path;

use super::convert::convert;
use super::toml_out::render;
use super::tree::parse_text;

/// The TOML for `text` (as `t.conf` in `/etc/nginx`).
fn import(text: &str) -> String {
    let tree = parse_text(text, "t.conf", Path::new("/etc/nginx")).unwrap();
    render(&convert(&tree, Path::new("/etc/nginx"), "t.conf").unwrap())
}

fn parsed(text: &str) -> toml::Value {
    let out = import(text);
    toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"))
}

const ZONE: &str = "proxy_cache_path /var/cache/a keys_zone=a:10m inactive=1h max_size=1g;\n";

#[test]
fn upstream_and_proxy_pass() {
    let v = parsed(
        "http { upstream app { server 10.0.0.1:8081 max_fails=3 fail_timeout=30s; server 10.0.0.2:8081; keepalive 20; }
         server { listen 8080; location / { proxy_pass http://app; proxy_read_timeout 30s; proxy_connect_timeout 2s; } } }",
    );
    let up = &v["upstreams"]["app"];
    assert_eq!(up["servers"][0]["max_fails"].as_integer(), Some(3));
    assert_eq!(up["servers"][1].as_str(), Some("10.0.0.2:8081"));
    assert_eq!(up["keepalive"].as_integer(), Some(20));
    assert_eq!(up["read_timeout"].as_str(), Some("30s"));
    assert_eq!(up["connect_timeout"].as_str(), Some("2s"));
    assert_eq!(v["routes"][0]["upstream"].as_str(), Some("app"));
    assert_eq!(v["server"]["listen"][0].as_str(), Some("0.0.0.0:8080"));
}

#[test]
fn direct_proxy_pass_synthesizes_an_upstream() {
    let v = parsed("server { location / { proxy_pass http://127.0.0.1:9000; } }");
    assert_eq!(v["routes"][0]["upstream"].as_str(), Some("127_0_0_1_9000"));
    assert_eq!(
        v["upstreams"]["127_0_0_1_9000"]["servers"][0].as_str(),
        Some("127.0.0.1:9000")
    );
    assert_eq!(
        v["upstreams"]["127_0_0_1_9000"]["max_fails"].as_integer(),
        Some(0)
    );
}

#[test]
fn https_upstreams_get_the_tls_keys() {
    let v = parsed(
        "upstream secure { server o.example:443; }
         server { location /a/ { proxy_pass https://secure; proxy_ssl_name api.example; proxy_ssl_verify on;
           proxy_ssl_trusted_certificate /etc/ca.pem; proxy_ssl_certificate /etc/c.pem; proxy_ssl_certificate_key /etc/k.pem; }
           location / { proxy_pass https://other.example; } }",
    );
    let up = &v["upstreams"]["secure"];
    assert_eq!(up["tls"].as_bool(), Some(true));
    assert_eq!(up["tls_server_name"].as_str(), Some("api.example"));
    assert_eq!(up["tls_verify"].as_bool(), Some(true));
    assert_eq!(up["tls_ca_file"].as_str(), Some("/etc/ca.pem"));
    assert_eq!(up["tls_client_cert"].as_str(), Some("/etc/c.pem"));
    assert_eq!(up["tls_client_key"].as_str(), Some("/etc/k.pem"));
    assert_eq!(
        v["upstreams"]["other_example"]["servers"][0].as_str(),
        Some("https://other.example:443")
    );
}

#[test]
fn cache_path_becomes_a_disk_zone() {
    let v = parsed(
        "proxy_cache_path /c keys_zone=z:10m levels=1:2 inactive=24h max_size=80G min_free=1g use_temp_path=off;
         server { location / { proxy_pass http://b:1; proxy_cache z; } }",
    );
    let z = &v["zones"]["z"];
    assert_eq!(z["kind"].as_str(), Some("disk"));
    assert_eq!(z["path"].as_str(), Some("/c"));
    assert_eq!(z["max_size"].as_str(), Some("80GiB"));
    assert_eq!(z["inactive"].as_str(), Some("1d"));
    assert_eq!(z["min_free"].as_str(), Some("1GiB"));
    assert_eq!(v["routes"][0]["zone"].as_str(), Some("z"));
    let out = import("proxy_cache_path /c keys_zone=z:1m levels=1:2 use_temp_path=off; server { location / { proxy_cache z; } }");
    assert!(out.contains("levels=1:2 ignored"), "{out}");
    assert!(out.contains("use_temp_path=off ignored"), "{out}");
}

#[test]
fn cache_valid_key_lock_and_stale() {
    let v = parsed(&format!(
        "{ZONE} server {{ location / {{ proxy_pass http://b:1; proxy_cache a;
           proxy_cache_valid 1s; proxy_cache_valid 404 1m; proxy_cache_valid any 5s;
           proxy_cache_key $scheme$host$request_uri; proxy_cache_lock on; proxy_cache_lock_timeout 3s;
           proxy_cache_use_stale error timeout updating http_500; proxy_cache_background_update on; }} }}"
    ));
    let r = &v["routes"][0];
    assert_eq!(r["ttl"]["200"].as_str(), Some("1s"));
    assert_eq!(r["ttl"]["301"].as_str(), Some("1s"));
    assert_eq!(r["ttl"]["404"].as_str(), Some("1m"));
    assert_eq!(r["ttl"]["any"].as_str(), Some("5s"));
    assert_eq!(r["key"].as_str(), Some("${scheme}${host}${request_uri}"));
    assert_eq!(r["refresh"].as_str(), Some("lock"));
    assert_eq!(r["lock_timeout"].as_str(), Some("3s"));
    assert_eq!(r["stale_while_revalidate"].as_str(), Some("1h"));
    assert_eq!(r["stale_if_error"].as_str(), Some("1h"));
    assert_eq!(r["heuristic_fraction"].as_float(), Some(0.0));
    assert_eq!(r["client_cache_control"].as_str(), Some("ignore"));
}

#[test]
fn no_lock_means_refresh_none() {
    let v = parsed(&format!(
        "{ZONE} server {{ location / {{ proxy_cache a; }} }}"
    ));
    assert_eq!(v["routes"][0]["refresh"].as_str(), Some("none"));
}

#[test]
fn min_uses_maps_onto_admission() {
    let with = |n: &str| {
        import(&format!(
            "{ZONE} server {{ location / {{ proxy_pass http://b:1; proxy_cache a; proxy_cache_min_uses {n}; }} }}"
        ))
    };
    // 1 is NGINX's default: nothing to say, and no key either way.
    let one = with("1");
    assert!(!one.contains("proxy_cache_min_uses"), "{one}");
    assert!(!one.contains("admission"), "{one}");
    // 2 or more: the default admission, with where the rules differ.
    // (Comments are wrapped: read them as one line.)
    let three = with("3").replace("\n# ", " ");
    assert!(
        three.contains("`proxy_cache_min_uses 3`")
            && three.contains("admission = \"frequent\"")
            && three.contains("90% full")
            && three.contains("NGINX waits for 3 requests")
            && three.contains("A memory zone has no admission"),
        "{three}"
    );
    assert!(
        !three.contains("not carried over: `proxy_cache_min_uses"),
        "{three}"
    );
    assert!(parsed(&format!(
        "{ZONE} server {{ location / {{ proxy_pass http://b:1; proxy_cache a; proxy_cache_min_uses 3; }} }}"
    ))["zones"]["a"]
        .get("admission")
        .is_none());
    for bad in ["0", "two"] {
        assert!(
            with(bad).contains(&format!("not carried over: `proxy_cache_min_uses {bad}`")),
            "{bad}"
        );
    }
}

#[test]
fn bypass_and_no_cache() {
    let v = parsed(&format!(
        "{ZONE} server {{ location / {{ proxy_cache a; proxy_cache_bypass $cookie_nocache $arg_nocache $http_pragma $skip;
           proxy_no_cache $cookie_session; }} }}"
    ));
    let r = &v["routes"][0];
    let bypass: Vec<&str> = r["bypass"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(bypass, ["cookie:nocache", "arg:nocache", "header:pragma"]);
    assert_eq!(r["no_store"][0].as_str(), Some("cookie:session"));
    assert!(import(&format!(
        "{ZONE} server {{ location / {{ proxy_cache a; proxy_cache_bypass $skip; }} }}"
    ))
    .contains("not carried over: `$skip`"));
}

#[test]
fn split_clients_becomes_hash_placement() {
    let v = parsed(
        "proxy_cache_path /d1 keys_zone=disk1:100m max_size=5G; proxy_cache_path /d2 keys_zone=disk2:100m max_size=5G;
         proxy_cache_path /d3 keys_zone=disk3:1m max_size=5G;
         split_clients $request_uri $cache { 50% disk1; 30% disk2; * disk3; }
         server { proxy_cache $cache; location / { proxy_pass http://u:1; } }",
    );
    let zones: Vec<&str> = v["routes"][0]["zones"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(zones, ["disk1", "disk2", "disk3"]);
    assert_eq!(v["zones"]["disk1"]["weight"].as_integer(), Some(50));
    assert_eq!(v["zones"]["disk2"]["weight"].as_integer(), Some(30));
    assert_eq!(v["zones"]["disk3"]["weight"].as_integer(), Some(20));
}

#[test]
fn map_becomes_routes_in_map_order() {
    let v = parsed(
        "proxy_cache_path /s keys_zone=ssd:10m max_size=1g; proxy_cache_path /d keys_zone=disk:10m max_size=1g;
         map $request_uri $cache { ~\\.mp4(\\?.*)?$ disk; ~*\\.avi disk; /exact disk; default ssd; }
         server { proxy_cache $cache; location / { proxy_pass http://u:1; } }",
    );
    let routes = v["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 4);
    assert_eq!(routes[0]["match"].as_str(), Some("^/exact$"));
    assert_eq!(routes[1]["match"].as_str(), Some("\\.mp4(\\?.*)?$"));
    assert_eq!(routes[1]["zone"].as_str(), Some("disk"));
    assert_eq!(routes[2]["match"].as_str(), Some("(?i)\\.avi"));
    assert!(routes[3].get("match").is_none());
    assert_eq!(routes[3]["zone"].as_str(), Some("ssd"));
}

#[test]
fn a_request_uri_map_inside_a_location_keeps_both() {
    // The location's `path` beside each entry's `match` (before `path`
    // existed, the entries were dropped for the map's default zone).
    let v = parsed(
        "proxy_cache_path /s keys_zone=ssd:10m max_size=1g; proxy_cache_path /d keys_zone=disk:10m max_size=1g;
         map $request_uri $cache { ~[?&]big=1 disk; default ssd; }
         server { proxy_cache $cache; location /v/ { proxy_pass http://u:1; } }",
    );
    let routes = v["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 2, "{routes:#?}");
    assert_eq!(routes[0]["path"].as_str(), Some("^/v/"));
    assert_eq!(routes[0]["match"].as_str(), Some("[?&]big=1"));
    assert_eq!(routes[0]["zone"].as_str(), Some("disk"));
    assert_eq!(routes[1]["path"].as_str(), Some("^/v/"));
    assert!(routes[1].get("match").is_none());
    assert_eq!(routes[1]["zone"].as_str(), Some("ssd"));
}

#[test]
fn locations_in_nginx_order() {
    let v = parsed(
        "server {
           location / { proxy_pass http://u:1; }
           location /static/ { proxy_pass http://u:1; }
           location ~ \\.php$ { proxy_pass http://u:1; }
           location ^~ /images/ { proxy_pass http://u:1; }
           location = /favicon.ico { proxy_pass http://u:1; }
         }",
    );
    // A location sees the path only: the routes' `path`, never `match`.
    let routes = v["routes"].as_array().unwrap();
    assert!(routes.iter().all(|r| r.get("match").is_none()));
    let paths: Vec<&str> = routes
        .iter()
        .map(|r| r.get("path").and_then(|m| m.as_str()).unwrap_or("*"))
        .collect();
    assert_eq!(
        paths,
        ["^/favicon\\.ico$", "^/images/", "\\.php$", "^/static/", "*"]
    );
}

#[test]
fn websocket_locations() {
    let v = parsed(
        "server { location /ws/ { proxy_pass http://u:1; proxy_http_version 1.1;
           proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection \"upgrade\"; }
           location / { proxy_pass http://u:1; } }",
    );
    assert_eq!(v["routes"][0]["websocket"].as_bool(), Some(true));
    assert_eq!(v["routes"][1]["websocket"].as_bool(), Some(false));
}

#[test]
fn server_keys() {
    let v = parsed(
        "events { worker_connections 1024; use epoll; }
         http { keepalive_timeout 75s; keepalive_requests 100; client_header_timeout 20s; send_timeout 30s;
           server { listen 127.0.0.1:8080 default_server; listen [::1]:8443 ssl http2; listen 8081 http2;
             ssl_certificate certs/a.pem; ssl_certificate_key /k.pem; location / { proxy_pass http://u:1; } } }",
    );
    let s = &v["server"];
    assert_eq!(s["max_connections"].as_integer(), Some(1024));
    assert_eq!(s["keepalive_timeout"].as_str(), Some("75s"));
    assert_eq!(s["keepalive_requests"].as_integer(), Some(100));
    assert_eq!(s["header_read_timeout"].as_str(), Some("20s"));
    assert_eq!(s["send_timeout"].as_str(), Some("30s"));
    assert_eq!(s["listen"][0].as_str(), Some("127.0.0.1:8080"));
    assert_eq!(s["listen"][1].as_str(), Some("0.0.0.0:8081"));
    assert_eq!(s["tls_listen"][0].as_str(), Some("[::1]:8443"));
    assert_eq!(s["h2c"].as_bool(), Some(true));
    assert_eq!(s["tls"][0]["cert"].as_str(), Some("/etc/nginx/certs/a.pem"));
}

#[test]
fn unknown_directives_are_commented_never_dropped() {
    let out = import(
        "http { frobnicate 1 2; gzip on; server { location / { proxy_pass http://u:1; add_header X-A b; expires 1h;
           proxy_hide_header X-Powered-By; proxy_ignore_headers Cache-Control; weird_thing; } } }",
    );
    for needle in [
        "`frobnicate 1 2`",
        "`gzip on`",
        "`add_header X-A b`",
        "`expires 1h`",
        "`proxy_hide_header X-Powered-By`",
        "`weird_thing`",
    ] {
        assert!(out.contains(needle), "{needle} missing in\n{out}");
    }
}

#[test]
fn include_is_followed_and_loops_are_errors() {
    let dir = std::env::temp_dir().join(format!("calmcache-import-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    std::fs::write(
        dir.join("nginx.conf"),
        "http {\n include conf.d/*.conf;\n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("conf.d/a.conf"),
        "server { location / { proxy_pass http://a:1; } }\n",
    )
    .unwrap();
    std::fs::write(dir.join("conf.d/b.conf"), "upstream b { server x:1; }\n").unwrap();
    let out = super::import_nginx(&dir.join("nginx.conf")).unwrap();
    assert!(
        out.contains("[upstreams.b]") && out.contains("upstream = \"a_1\""),
        "{out}"
    );
    std::fs::write(dir.join("conf.d/b.conf"), "include conf.d/c.conf;\n").unwrap();
    std::fs::write(dir.join("conf.d/c.conf"), "\ninclude conf.d/b.conf;\n").unwrap();
    let err = super::import_nginx(&dir.join("nginx.conf"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("conf.d/c.conf:2: include loop"), "{err}");
    std::fs::write(dir.join("conf.d/b.conf"), "include missing.conf;\n").unwrap();
    let err = super::import_nginx(&dir.join("nginx.conf"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("conf.d/b.conf:1: cannot read"), "{err}");
    std::fs::write(
        dir.join("conf.d/b.conf"),
        "server {\n location / {\n proxy_pass http://a:1\n }\n}\n",
    )
    .unwrap();
    let err = super::import_nginx(&dir.join("nginx.conf"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("conf.d/b.conf:3: directive \"proxy_pass\" has no ending ';'"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn http_level_certificates_serve_tls_servers() {
    let v = parsed(
        "http { ssl_certificate /c.pem; ssl_certificate_key /k.pem;
           server { listen 443 ssl; location / { proxy_pass http://u:1; } }
           server { listen 8443 ssl; location / { proxy_pass http://u:1; } } }",
    );
    let tls = v["server"]["tls"].as_array().unwrap();
    assert_eq!(tls.len(), 1);
    assert_eq!(tls[0]["cert"].as_str(), Some("/c.pem"));
    assert_eq!(v["server"]["tls_listen"].as_array().unwrap().len(), 2);
}

/// Each route's `hosts` (`*` for none) and upstream, in order.
fn hosts_and_upstreams(v: &toml::Value) -> Vec<(String, String)> {
    v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let hosts = match r.get("hosts") {
                Some(h) => h
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h.as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(" "),
                None => "*".into(),
            };
            (hosts, r["upstream"].as_str().unwrap().to_owned())
        })
        .collect()
}

const SITES: &str = "http {
  server { listen 80; server_name A.test www.a.test; location / { proxy_pass http://a:1; } }
  server { listen 80; server_name *.b.test .c.b.test; location / { proxy_pass http://b:1; } }
  server { listen 80 default_server; server_name _ d.test; location / { proxy_pass http://d:1; } }
  server { listen 80; server_name ~^(?<user>.+)\\.e\\.test$ www.e.*; location / { proxy_pass http://e:1; } }
  server { listen 80; server_name \"\"; location / { proxy_pass http://f:1; } }
  server { listen 80; server_name x.b.test *.test; location /x/ { proxy_pass http://g:1; } }
}";

#[test]
fn server_names_become_hosts_in_nginx_order() {
    let out = import(SITES);
    let v: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let got = hosts_and_upstreams(&v);
    let want = [
        // Exact names, every server in file order (the default server's
        // d.test too: *.test, tried before the catch-all, would take it).
        ("a.test www.a.test", "a_1"),
        ("d.test", "d_1"),
        ("x.b.test", "g_1"),
        // Wildcards, longest suffix first (one server's next to each other
        // in one group).
        (".c.b.test *.b.test", "b_1"),
        ("*.test", "g_1"),
        // The default server for every other Host.
        ("*", "d_1"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(h, u)| (h.to_string(), u.to_string()))
        .collect();
    assert_eq!(got, want, "{out}");
    let joined = out.replace("\n# ", " ");
    for needle in [
        "not carried over: server_name \"www.e.*\"",
        "a trailing wildcard",
        "a regex name",
        "server_name \"_\" (t.conf:4): the usual catch-all spelling",
        "server_name \"\" (t.conf:6): the empty name",
        "server (t.conf:5) is left out: calmcache cannot express any of its names",
        "server (t.conf:6) is left out: it has no name",
        "server (t.conf:7) by its exact names",
        "server (t.conf:4), the default server",
        "This server has no location for every path",
    ] {
        assert!(joined.contains(needle), "{needle} missing in\n{out}");
    }
    assert!(
        !out.contains("e_1"),
        "the regex-named server is left out\n{out}"
    );
    let config = crate::config::Config::from_toml(&out, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    let names: HashSet<&str> = config.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.len(), config.routes.len(), "route names are unique");
}

#[test]
fn one_server_answers_every_host_and_a_first_server_is_the_default() {
    let v = parsed("server { server_name a.test; location / { proxy_pass http://a:1; } }");
    assert!(v["routes"][0].get("hosts").is_none());
    let v = parsed(
        "server { server_name a.test; location / { proxy_pass http://a:1; } }
         server { server_name b.test; location / { proxy_pass http://b:1; } }",
    );
    let got = hosts_and_upstreams(&v);
    assert_eq!(
        got,
        [
            ("b.test".to_string(), "b_1".to_string()),
            ("*".to_string(), "a_1".to_string()),
        ]
    );
}

#[test]
fn servers_on_different_ports_are_said_to_share_the_routes() {
    let two = |second: &str| {
        import(&format!(
            "server {{ listen 80; server_name a.test; location / {{ proxy_pass http://a:1; }} }}
             server {{ {second} server_name b.test; location / {{ proxy_pass http://b:1; }} }}"
        ))
    };
    assert!(two("listen 8080;").contains("listen on different addresses"));
    assert!(!two("listen *:80;").contains("listen on different addresses"));
    assert!(!two("").contains("listen on different addresses"));
}

/// Each route's `path`, `match` (`*` for none) and upstream, in order.
fn conditions(v: &toml::Value) -> Vec<(String, String, String)> {
    let s = |r: &toml::Value, k: &str| r.get(k).and_then(|x| x.as_str()).unwrap_or("*").to_owned();
    v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (s(r, "path"), s(r, "match"), s(r, "upstream")))
        .collect()
}

/// Issue 28, importer mistake 1: the image rule nested in `~ ^/uploads/`
/// keeps its parent's condition and stays after the avatar route's paths.
#[test]
fn a_regex_nested_in_a_regex_keeps_its_parents_condition() {
    let v = parsed(
        "upstream app { server 10.0.0.1:3000; } upstream img { server 10.0.0.2:3000; }
         upstream av { server 10.0.0.3:3000; }
         server {
           location ~ ^/uploads/ { proxy_pass http://app;
             location ~* \\.(png|jpg)$ { proxy_pass http://img; } }
           location ~ ^/letter_avatar/ { proxy_pass http://av; }
           location / { proxy_pass http://app; }
         }",
    );
    let want = [
        ("(?i)\\.(png|jpg)$", "^/uploads/", "img"),
        ("^/uploads/", "*", "app"),
        ("^/letter_avatar/", "*", "av"),
        ("*", "*", "app"),
    ];
    let got = conditions(&v);
    let got: Vec<(&str, &str, &str)> = got
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    assert_eq!(got, want);
}

/// A prefix with a nested regex gets a block of its own: the nested regex,
/// the server's regexes restricted to the prefix, then the prefix; a `^~`
/// prefix keeps the server's regexes out.
#[test]
fn nested_prefix_blocks_in_nginx_order() {
    let v = parsed(
        "server {
           location /a/ { proxy_pass http://u:1;
             location ~ \\.css$ { proxy_pass http://u:2; }
             location /a/b/ { proxy_pass http://u:3; } }
           location ^~ /s/ { proxy_pass http://u:4; location ~ \\.js$ { proxy_pass http://u:5; } }
           location ~ \\.js$ { proxy_pass http://u:6; }
           location / { proxy_pass http://u:7; }
         }",
    );
    let got: Vec<String> = conditions(&v)
        .into_iter()
        .map(|(p, m, u)| format!("{p} {m} {u}"))
        .collect();
    assert_eq!(
        got,
        [
            // /a/'s regexes then the server's (also for /a/b/, which has
            // none of its own), then /a/b/, then /a/.
            "\\.css$ ^/a/ u_2",
            "\\.js$ ^/a/ u_6",
            "^/a/b/ * u_3",
            "^/a/ * u_1",
            // ^~ /s/: its own regexes only.
            "\\.js$ ^/s/ u_5",
            "^/s/ * u_4",
            "\\.js$ * u_6",
            "* * u_7",
        ]
    );
}

/// Issue 28, importer mistake 3: `try_files $uri @app` sends the location's
/// requests to `location @app`'s upstream and zone, not to a placeholder.
#[test]
fn try_files_follows_the_named_location() {
    let text = format!(
        "{ZONE}upstream backend {{ server 10.0.0.1:3000 fail_timeout=0; }}
         server {{ root /srv/www;
           location / {{ try_files $uri $uri/ @app; }}
           location @app {{ proxy_pass http://backend; proxy_cache a; proxy_cache_valid 200 1m; }}
         }}"
    );
    let out = import(&text);
    let v: toml::Value = toml::from_str(&out).unwrap();
    assert_eq!(v["routes"][0]["root"].as_str(), Some("/srv/www"), "{out}");
    assert_eq!(
        v["routes"][1]["upstream"].as_str(),
        Some("backend"),
        "{out}"
    );
    assert_eq!(v["routes"][1]["zone"].as_str(), Some("a"), "{out}");
    assert!(v["upstreams"].get("origin").is_none(), "{out}");
    assert!(!out.contains("PLACEHOLDER"), "{out}");
    assert!(out.contains("(t.conf:3)"), "{out}");
}

/// Issue 28, importer mistake 4: both proxy_ignore_headers lines count,
/// and a directive nothing reads is named with its file:line.
#[test]
fn two_ignore_headers_lines_both_count() {
    let text = format!(
        "{ZONE}server {{ location / {{ proxy_pass http://u:1; proxy_cache a;
           proxy_ignore_headers Cache-Control;
           proxy_ignore_headers Set-Cookie; }}
           proxy_cache_use_stale error; }}"
    );
    let out = import(&text);
    assert!(
        out.contains("`proxy_ignore_headers Cache-Control` (t.conf:3)"),
        "{out}"
    );
    assert!(
        out.contains("`proxy_ignore_headers Set-Cookie` (t.conf:4)"),
        "{out}"
    );
    assert!(
        out.contains("ignore_headers = [\"Cache-Control\", \"Set-Cookie\"]"),
        "{out}"
    );
    assert!(!out.contains("override_origin = true"), "{out}");
}

/// NGINX's `proxy_ignore_headers Cache-Control` leaves Expires in force;
/// X-Accel-Redirect is a field calmcache does not act on.
#[test]
fn ignore_headers_keep_nginxs_meaning_field_by_field() {
    let out = import(&format!(
        "{ZONE}server {{ location / {{ proxy_pass http://u:1; proxy_cache a;
           proxy_ignore_headers cache-control X-Accel-Redirect Vary; }} }}"
    ));
    assert!(
        out.contains("ignore_headers = [\"Cache-Control\", \"Vary\"]"),
        "{out}"
    );
    assert!(out.contains("`X-Accel-Redirect` of"), "{out}");
    assert!(!out.contains("override_origin = true"), "{out}");
}

/// Every directive of every fixture (counted from the tree, apart from the
/// converter) is carried over or named with its file:line in a comment.
#[test]
fn every_fixture_directive_is_carried_or_commented() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nginx");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .collect();
    files.sort();
    assert!(files.len() >= 14, "{files:?}");
    for path in files {
        let tree = super::tree::load(&path).unwrap();
        let mut nodes = Vec::new();
        census_nodes(&tree, &mut nodes);
        let prefix = path.parent().unwrap();
        let (doc, census) = super::convert::counted(&tree, prefix, "f.conf").unwrap();
        let comments: Vec<&str> = doc.comments().collect();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        println!("{name}: {census}");
        assert_eq!(census.directives, nodes.len(), "{name}");
        for d in nodes {
            let needle = format!("({})", d.pos);
            assert!(
                census.carried_at.contains(&d.pos.to_string())
                    || comments.iter().any(|c| c.contains(&needle)),
                "{name}: `{}` ({}) neither carried over nor commented",
                d.text(),
                d.pos
            );
        }
    }
}

/// Every directive node of `tree`, depth first (the census, apart from
/// the ledger).
fn census_nodes<'a>(tree: &'a [super::tree::Directive], out: &mut Vec<&'a super::tree::Directive>) {
    for d in tree {
        out.push(d);
        census_nodes(d.children(), out);
    }
}

/// Issue 28, importer mistake 4: http-level cache settings no location
/// uses (an include's `proxy_cache_use_stale`, `proxy_ignore_headers`) are
/// named with their file:line, not left out.
#[test]
fn settings_nothing_reads_are_commented() {
    let out = import(
        "http { proxy_cache_use_stale error timeout updating;
         proxy_ignore_headers Set-Cookie;
         server { location / { proxy_pass http://u:1; } } }",
    );
    for needle in [
        "`proxy_cache_use_stale error timeout updating` (t.conf:1)",
        "`proxy_ignore_headers Set-Cookie` (t.conf:2)",
    ] {
        assert!(out.contains(needle), "{needle} not in:\n{out}");
    }
    let tree = parse_text(
        "proxy_buffers 8 16k; server { listen 8080; location / { proxy_pass http://u:1; } }",
        "t.conf",
        Path::new("/etc/nginx"),
    )
    .unwrap();
    let (_, census) = super::convert::counted(&tree, Path::new("/etc/nginx"), "t.conf").unwrap();
    assert_eq!(
        (census.directives, census.carried, census.commented),
        (5, 4, 1),
        "{census}"
    );
}

/// Issue 28: an `internal` location must not be fetchable from outside.
#[test]
fn internal_locations_become_internal_routes() {
    let v = parsed(
        "server { listen 80;
           location /backups/ { internal; proxy_pass http://127.0.0.1:9000; }
           location /files/ { internal; }
           location / { proxy_pass http://127.0.0.1:9000; } }",
    );
    assert_eq!(v["routes"][0]["internal"].as_bool(), Some(true));
    assert_eq!(v["routes"][0]["upstream"].as_str(), Some("127_0_0_1_9000"));
    // /files/ serves NGINX's default root, 404 when absent.
    assert_eq!(v["routes"][1]["internal"].as_bool(), Some(true));
    assert_eq!(v["routes"][1]["absent"].as_str(), Some("404"));
    assert!(v["routes"][2].get("internal").is_none());
}

#[test]
fn return_locations_answer_themselves() {
    let out = import(
        "server { listen 80;
           location = /healthz { return 204; }
           location /old/ { return 301 https://$host/new$request_uri; proxy_pass http://127.0.0.1:9000; }
           location /gone/ { return 410 \"gone $request_method\"; }
           location /odd/ { return 301 https://$server_name/; }
           location / { proxy_pass http://127.0.0.1:9000; } }",
    );
    let v: toml::Value = toml::from_str(&out).unwrap();
    let route = |path: &str| {
        v["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r.get("path").and_then(|p| p.as_str()) == Some(path))
            .unwrap_or_else(|| panic!("no route {path}\n{out}"))
            .clone()
    };
    let ret = |path: &str, key: &str| route(path).get("return").and_then(|r| r.get(key)).cloned();
    assert_eq!(
        ret("^/healthz$", "status").and_then(|s| s.as_integer()),
        Some(204)
    );
    assert!(route("^/healthz$").get("upstream").is_none());
    assert_eq!(
        ret("^/old/", "location")
            .and_then(|s| s.as_str().map(str::to_owned))
            .as_deref(),
        Some("https://$host/new$request_uri")
    );
    assert!(route("^/old/").get("upstream").is_none());
    assert!(
        out.contains("`proxy_pass http://127.0.0.1:9000` (t.conf:3): never"),
        "{out}"
    );
    assert_eq!(
        ret("^/gone/", "body")
            .and_then(|s| s.as_str().map(str::to_owned))
            .as_deref(),
        Some("gone $method")
    );
    // A variable calmcache does not know: commented, the route proxies.
    assert!(route("^/odd/").get("return").is_none());
    assert!(out.contains("(t.conf:5): $server_name"), "{out}");
}

#[test]
fn a_redirect_server_answers_only_on_its_own_listeners() {
    let out = import(
        "server { listen 80; server_name example.com; return 301 https://$host$request_uri; }
         server { listen 443 ssl; server_name example.com; ssl_certificate /c.pem; ssl_certificate_key /k.pem;
           location / { proxy_pass http://127.0.0.1:9000; } }",
    );
    let v: toml::Value = toml::from_str(&out).unwrap();
    let r = v["routes"].as_array().unwrap();
    let redirect = r.iter().find(|r| r.get("return").is_some()).unwrap();
    assert_eq!(redirect["return"]["status"].as_integer(), Some(301));
    assert_eq!(redirect["listeners"][0].as_str(), Some("0.0.0.0:80"));
    let app = r.iter().find(|r| r.get("upstream").is_some()).unwrap();
    assert_eq!(app["listeners"][0].as_str(), Some("0.0.0.0:443"));
    assert!(!out.contains("PLACEHOLDER"), "{out}");
}

#[test]
fn a_server_return_wins_over_its_locations() {
    let out = import(
        "server { listen 80; return 301 https://$host$request_uri;
           location / { proxy_pass http://127.0.0.1:9000; } }",
    );
    let v: toml::Value = toml::from_str(&out).unwrap();
    assert_eq!(v["routes"].as_array().unwrap().len(), 1);
    assert_eq!(v["routes"][0]["return"]["status"].as_integer(), Some(301));
    assert!(out.contains("none of its locations is reached"), "{out}");
}

/// `gzip on` in effect where a location proxies: its passed answers are
/// gzipped on the fly, with NGINX's types (text/html always) and length.
#[test]
fn gzip_becomes_compress_passed() {
    let v = parsed(
        "http { gzip on; gzip_types text/css application/json; gzip_min_length 1k;
           server { location / { proxy_pass http://u:1; }
                    location /raw/ { gzip off; proxy_pass http://u:1; } } }",
    );
    let routes = v["routes"].as_array().unwrap();
    let all = routes.iter().find(|r| r.get("path").is_none()).unwrap();
    assert_eq!(all["compress_passed"][0].as_str(), Some("gzip"));
    let types: Vec<&str> = all["compress_passed_types"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert_eq!(types, ["text/html", "text/css", "application/json"]);
    assert_eq!(all["compress_passed_min_length"].as_integer(), Some(1024));
    let raw = routes.iter().find(|r| r.get("path").is_some()).unwrap();
    assert!(raw.get("compress_passed").is_none());
    let plain = parsed("gzip on; server { location / { proxy_pass http://u:1; } }");
    assert_eq!(
        plain["routes"][0]["compress_passed_types"][0].as_str(),
        Some("text/html")
    );
}

/// proxy_set_header, add_header, proxy_hide_header and expires become the
/// route's header rules; what calmcache does itself or check refuses is
/// commented.
#[test]
fn header_directives_become_header_rules() {
    let out = import(&format!(
        "{ZONE}server {{
           proxy_set_header Host $host;
           proxy_set_header X-Real-IP $remote_addr;
           proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
           proxy_set_header Accept-Encoding \"\";
           proxy_set_header X-Bad $proxy_port;
           add_header X-Cache-Status $upstream_cache_status always;
           add_header X-Frame-Options SAMEORIGIN;
           add_header X-Frame-Options DENY;
           add_header ETag x;
           proxy_hide_header X-Powered-By;
           expires 1h;
           location / {{ proxy_pass http://u:1; proxy_cache a; }} }}"
    ));
    let v: toml::Value = toml::from_str(&out).unwrap();
    let r = &v["routes"][0];
    let set = r["request_headers"]["set"].as_table().unwrap();
    assert_eq!(set.len(), 1, "{out}");
    assert_eq!(set["X-Real-IP"].as_str(), Some("$remote_addr"));
    let resp = &r["response_headers"];
    assert_eq!(
        resp["always"]["X-Cache-Status"].as_str(),
        Some("$upstream_cache_status")
    );
    assert_eq!(resp["add"]["X-Frame-Options"].as_str(), Some("SAMEORIGIN"));
    assert!(resp["add"].get("ETag").is_none());
    assert_eq!(resp["remove"][0].as_str(), Some("X-Powered-By"));
    assert_eq!(r["expires"].as_str(), Some("1h"));
    for commented in [
        "`proxy_set_header Host $host` (t.conf:3)",
        "`proxy_set_header Accept-Encoding \"\"` (t.conf:6)",
        "`proxy_set_header X-Bad $proxy_port` (t.conf:7)",
        "`add_header X-Frame-Options DENY` (t.conf:10)",
        "`add_header ETag x` (t.conf:11)",
    ] {
        let joined = out.replace("\n# ", " ");
        assert!(joined.contains(commented), "{commented}\n{out}");
    }
}

/// Issue 28, importer mistake 3: `try_files $uri @app` with a `root` is a
/// file route, then the named location's route.
#[test]
fn try_files_with_a_root_serves_files_first() {
    let v = parsed(
        "server { root /srv/www/public; index index.html;
           location / { try_files $uri $uri/ @app; }
           location @app { proxy_pass http://127.0.0.1:3000; } }",
    );
    let r = v["routes"].as_array().unwrap();
    assert_eq!(r.len(), 2, "{v:?}");
    assert_eq!(r[0]["root"].as_str(), Some("/srv/www/public"));
    assert_eq!(r[0]["index"][0].as_str(), Some("index.html"));
    assert!(r[0].get("upstream").is_none());
    assert_eq!(r[1]["upstream"].as_str(), Some("127_0_0_1_3000"));
    // Without a root: the named location only.
    let v = parsed(
        "server { location / { try_files $uri @app; }
           location @app { proxy_pass http://127.0.0.1:3000; } }",
    );
    assert_eq!(v["routes"].as_array().unwrap().len(), 1);
}

/// limit_req_zone / limit_conn_zone and the locations' limit_req /
/// limit_conn: [limits.NAME] with NGINX's 503, and route limits.
#[test]
fn limits_become_limit_tables_and_route_limits() {
    let v = parsed(
        "limit_req_zone $binary_remote_addr zone=api:10m rate=10r/s;
         limit_conn_zone $binary_remote_addr zone=addr:10m;
         limit_req_zone $server_name zone=host:10m rate=1r/s;
         server { location / { limit_req zone=api burst=20 nodelay; limit_conn addr 4;
                               limit_conn_status 429; limit_req zone=host; proxy_pass http://u:1; } }",
    );
    let api = &v["limits"]["api"];
    assert_eq!(api["rate"].as_str(), Some("10r/s"));
    assert_eq!(api["burst"].as_integer(), Some(20));
    assert_eq!(api["delay"].as_str(), Some("nodelay"));
    assert_eq!(api["status"].as_integer(), Some(503));
    assert_eq!(v["limits"]["addr"]["connections"].as_integer(), Some(4));
    assert_eq!(v["limits"]["addr"]["status"].as_integer(), Some(429));
    assert!(v["limits"].get("host").is_none());
    let limits: Vec<&str> = v["routes"][0]["limits"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert_eq!(limits, ["api", "addr"]);
}

/// NGINX has a default server per address: with a redirect server on :80
/// and the app on :443 both named example.com, a Host neither names on
/// :443 goes to the app's server (it went nowhere: 404 "no route").
#[test]
fn each_address_has_its_own_default_server() {
    let v = parsed(
        "server { listen 80; server_name example.com; return 301 https://$host$request_uri; }
         server { listen 443 ssl; server_name example.com; ssl_certificate /c.pem; ssl_certificate_key /k.pem;
           location / { proxy_pass http://127.0.0.1:9000; } }",
    );
    let routes = v["routes"].as_array().unwrap();
    let catch_all_on = |addr: &str| {
        routes.iter().any(|r| {
            r.get("hosts").is_none()
                && r["listeners"].as_array().unwrap()[..] == [toml::Value::from(addr)]
        })
    };
    assert!(catch_all_on("0.0.0.0:443"), "{routes:?}");
    assert!(catch_all_on("0.0.0.0:80"), "{routes:?}");
}

/// `gzip on` where a location stores: NGINX gzips its hits too, so the
/// route also gets `compress = ["gzip"]`; a route that stores nothing
/// does not.
#[test]
fn gzip_on_a_cached_route_also_compresses_stored_answers() {
    let v = parsed(
        "http { gzip on; proxy_cache_path /tmp/c keys_zone=z:1m;
           server { location /c/ { proxy_pass http://u:1; proxy_cache z; proxy_cache_valid 200 1m; }
                    location / { proxy_pass http://u:1; } } }",
    );
    let routes = v["routes"].as_array().unwrap();
    let cached = routes.iter().find(|r| r.get("zone").is_some()).unwrap();
    assert_eq!(cached["compress"][0].as_str(), Some("gzip"));
    assert_eq!(cached["compress_passed"][0].as_str(), Some("gzip"));
    let passed = routes.iter().find(|r| r.get("zone").is_none()).unwrap();
    assert!(passed.get("compress").is_none());
}

/// Issue 28, side by side: where no proxy_set_header Host is in force,
/// NGINX sends its `$proxy_host` (proxy_pass's host, its port unless the
/// scheme's default; `localhost` over a unix socket); a level with any
/// proxy_set_header replaces the outer ones, Host included.
#[test]
fn nginx_default_host_is_the_proxy_pass_host() {
    let out = import(
        "upstream app { server 10.0.0.1:8081; }
         server {
           proxy_set_header X-Real-IP $remote_addr;
           location / { proxy_pass http://app; }
           location /d/ { proxy_pass http://10.0.0.2:8082/x/; }
           location /p/ { proxy_pass https://api.example:443; }
           location /u/ { proxy_pass http://unix:/run/app.sock:; }
           location /own/ { proxy_set_header Host $host; proxy_pass http://app; }
           location /ph/ { proxy_set_header Host $proxy_host; proxy_pass http://app:80; }
           location /inner/ { proxy_set_header X-A b; proxy_pass http://app; }
           location /none/ { }
         }",
    );
    let v: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let host = |i: usize| {
        v["routes"][i]
            .get("request_headers")
            .and_then(|h| h["set"].get("Host"))
            .and_then(|h| h.as_str())
    };
    let path = |i: usize| v["routes"][i]["path"].as_str().unwrap_or("");
    let by_path = |p: &str| (0..9).find(|i| path(*i).contains(p)).unwrap();
    assert_eq!(host(by_path("/d/")), Some("10.0.0.2:8082"), "{out}");
    assert_eq!(host(by_path("/p/")), Some("api.example"), "{out}");
    assert_eq!(host(by_path("/u/")), Some("localhost"), "{out}");
    assert_eq!(
        host(by_path("/own/")),
        None,
        "$host is calmcache's own\n{out}"
    );
    assert_eq!(host(by_path("/ph/")), Some("app"), "{out}");
    assert_eq!(host(by_path("/inner/")), Some("app"), "{out}");
    assert_eq!(host(by_path("/none/")), None, "no proxy_pass\n{out}");
    let root = (0..9)
        .find(|i| v["routes"][*i].get("path").is_none())
        .unwrap();
    assert_eq!(host(root), Some("app"), "{out}");
    let set = v["routes"][root]["request_headers"]["set"]
        .as_table()
        .unwrap();
    assert_eq!(set["X-Real-IP"].as_str(), Some("$remote_addr"), "{out}");
    let inner = v["routes"][by_path("/inner/")]["request_headers"]["set"]
        .as_table()
        .unwrap();
    assert!(inner.get("X-Real-IP").is_none(), "replaced\n{out}");
    assert!(
        out.replace("\n# ", " ").contains("NGINX's default"),
        "{out}"
    );
    crate::config::Config::from_toml(&out, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
}

/// Issue 28, side by side: `proxy_cache` without `proxy_cache_valid` while
/// Cache-Control and Expires are ignored stores nothing in NGINX (only an
/// X-Accel-Expires calmcache does not read could): the route does not
/// cache. With the origin's Cache-Control still read, or a
/// proxy_cache_valid, it caches.
#[test]
fn a_cache_with_no_lifetime_left_does_not_cache() {
    let out = import(&format!(
        "{ZONE}proxy_cache_use_stale updating;
         server {{
           proxy_ignore_headers Cache-Control;
           proxy_ignore_headers Expires;
           location /none/ {{ proxy_pass http://u:1; proxy_cache a; }}
           location /valid/ {{ proxy_pass http://u:1; proxy_cache a; proxy_cache_valid 1m; }}
           location /cc/ {{ proxy_ignore_headers Expires; proxy_pass http://u:1; proxy_cache a; }}
           location /all/ {{
             proxy_ignore_headers Cache-Control Expires X-Accel-Expires;
             proxy_pass http://u:1; proxy_cache a;
           }}
         }}"
    ));
    let v: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let routes = v["routes"].as_array().unwrap();
    let route = |p: &str| {
        routes
            .iter()
            .find(|r| r["path"].as_str().is_some_and(|x| x.contains(p)))
            .unwrap()
    };
    for p in ["/none/", "/all/"] {
        let r = route(p);
        assert!(r.get("zone").is_none(), "{p}\n{out}");
        assert!(r.get("stale_while_revalidate").is_none(), "{p}\n{out}");
    }
    for p in ["/valid/", "/cc/"] {
        assert_eq!(route(p)["zone"].as_str(), Some("a"), "{p}\n{out}");
    }
    let joined = out.replace("\n# ", " ");
    assert!(
        joined.contains("only answers carrying X-Accel-Expires"),
        "{out}"
    );
    assert!(joined.contains("NGINX stores nothing here"), "{out}");
    crate::config::Config::from_toml(&out, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
}

/// Issue 28, side by side: a location with no proxy_pass, return, root,
/// alias or try_files serves NGINX's default root (`html` under its
/// prefix): a file route with `absent = "404"` (not the PLACEHOLDER
/// upstream's 502).
#[test]
fn a_location_without_a_handler_serves_the_default_root() {
    let out = import(
        "server {
           location /.well-known/acme-challenge/ { allow all; }
           location /rw/ { rewrite ^ /x; }
           location / { return 301 https://$host$request_uri; }
         }",
    );
    let v: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let routes = v["routes"].as_array().unwrap();
    let acme: Vec<&toml::Value> = routes
        .iter()
        .filter(|r| {
            r.get("path")
                .is_some_and(|p| p.as_str().unwrap().contains("acme"))
        })
        .collect();
    assert_eq!(acme.len(), 1, "{out}");
    assert_eq!(acme[0]["root"].as_str(), Some("/etc/nginx/html"), "{out}");
    assert!(acme[0].get("upstream").is_none(), "{out}");
    assert_eq!(acme[0]["absent"].as_str(), Some("404"), "{out}");
    let rw = routes
        .iter()
        .find(|r| {
            r.get("path")
                .is_some_and(|p| p.as_str().unwrap().contains("rw"))
        })
        .unwrap();
    assert_eq!(
        rw["upstream"].as_str(),
        Some("origin"),
        "rewrite is no default root\n{out}"
    );
    crate::config::Config::from_toml(&out, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
}

/// `listen ... proxy_protocol` with `set_real_ip_from` and `real_ip_header
/// proxy_protocol` (issue 28, item 9): the listeners and the balancers;
/// the imported config passes `check`.
#[test]
fn proxy_protocol_listeners_and_their_sources() {
    let conf = |real: &str| {
        format!(
            "http {{ {real} server {{ listen 80 proxy_protocol; listen 8080; \
             location / {{ proxy_pass http://u:1; }} }} }}"
        )
    };
    let out = import(&conf(
        "set_real_ip_from 10.0.0.0/8; set_real_ip_from 192.0.2.1; real_ip_header proxy_protocol; real_ip_recursive on;",
    ));
    let v: toml::Value = toml::from_str(&out).unwrap();
    let s = &v["server"];
    assert_eq!(
        s["proxy_protocol_listeners"].as_array().unwrap().len(),
        1,
        "{out}"
    );
    assert_eq!(
        s["proxy_protocol_listeners"][0].as_str(),
        Some("0.0.0.0:80")
    );
    assert_eq!(s["proxy_protocol_from"][0].as_str(), Some("10.0.0.0/8"));
    assert_eq!(s["proxy_protocol_from"][1].as_str(), Some("192.0.2.1"));
    assert!(out.contains("real_ip_recursive on"), "commented: {out}");
    crate::config::Config::from_toml(&out, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    // Without set_real_ip_from NGINX took the header from anyone: said so.
    let out = import(&conf(""));
    let v: toml::Value = toml::from_str(&out).unwrap();
    assert_eq!(
        v["server"]["proxy_protocol_from"][0].as_str(),
        Some("0.0.0.0/0")
    );
    assert!(
        out.contains("(no `set_real_ip_from`): narrow this"),
        "{out}"
    );
    crate::config::Config::from_toml(&out, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    // set_real_ip_from without a proxy_protocol listener: commented.
    let out = import(
        "http { set_real_ip_from 10.0.0.0/8; real_ip_header X-Forwarded-For; \
         server { listen 80; location / { proxy_pass http://u:1; } } }",
    );
    assert!(!out.contains("proxy_protocol_from ="), "{out}");
    assert!(
        out.contains("not carried over: `set_real_ip_from 10.0.0.0/8`"),
        "{out}"
    );
    assert!(
        out.contains("not carried over: `real_ip_header X-Forwarded-For`"),
        "{out}"
    );
}
