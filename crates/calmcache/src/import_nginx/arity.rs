//! Argument counts NGINX enforces, so that a missing `;` inside a block
//! (`proxy_pass http://app` followed by `proxy_cache one;` on the next
//! line reads as one directive with three arguments) is an error with the
//! file and line, as NGINX reports it ("invalid number of arguments").
//!
//! Owns only the counts of the directives the importer reads; every other
//! directive is commented, never checked.

use super::tree::Directive;
use super::ImportError;

/// Directive name, least and most arguments.
const COUNTS: [(&str, usize, usize); 30] = [
    ("proxy_pass", 1, 1),
    ("proxy_cache", 1, 1),
    ("proxy_cache_key", 1, 1),
    ("proxy_cache_lock", 1, 1),
    ("proxy_cache_lock_timeout", 1, 1),
    ("proxy_cache_background_update", 1, 1),
    ("proxy_cache_convert_head", 1, 1),
    ("proxy_connect_timeout", 1, 1),
    ("proxy_read_timeout", 1, 1),
    ("proxy_send_timeout", 1, 1),
    ("proxy_http_version", 1, 1),
    ("proxy_set_header", 2, 2),
    ("proxy_ssl_name", 1, 1),
    ("proxy_ssl_server_name", 1, 1),
    ("proxy_ssl_verify", 1, 1),
    ("proxy_ssl_trusted_certificate", 1, 1),
    ("proxy_ssl_certificate", 1, 1),
    ("proxy_ssl_certificate_key", 1, 1),
    ("keepalive", 1, 1),
    ("keepalive_timeout", 1, 2),
    ("keepalive_requests", 1, 1),
    ("client_header_timeout", 1, 1),
    ("send_timeout", 1, 1),
    ("worker_connections", 1, 1),
    ("worker_processes", 1, 1),
    ("ssl_certificate", 1, 1),
    ("ssl_certificate_key", 1, 1),
    ("include", 1, 1),
    ("upstream", 1, 1),
    ("split_clients", 2, 2),
];

/// The first directive (depth first) with an argument count NGINX refuses.
pub(crate) fn check(tree: &[Directive]) -> Result<(), ImportError> {
    for d in tree {
        if let Some(&(_, least, most)) = COUNTS.iter().find(|(name, _, _)| *name == d.name) {
            let n = d.args.len();
            if n < least || n > most {
                let hint = if n > most {
                    " (a missing ';' at the end of this line?)"
                } else {
                    ""
                };
                return Err(ImportError::at(
                    &d.pos,
                    format!("invalid number of arguments in \"{}\": {n}{hint}", d.name),
                ));
            }
        }
        check(d.children())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::import_nginx::tree::parse_text;

    #[test]
    fn a_missing_semicolon_inside_a_block_is_an_error() {
        let tree = parse_text(
            "server {\n location / {\n  proxy_pass http://app\n  proxy_cache one;\n }\n}\n",
            "t.conf",
            std::path::Path::new("/"),
        )
        .unwrap();
        let err = check(&tree).unwrap_err().to_string();
        assert_eq!(
            err,
            "t.conf:3: invalid number of arguments in \"proxy_pass\": 3 (a missing ';' at the end of this line?)"
        );
    }
}
