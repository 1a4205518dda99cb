//! NGINX's `return` as a route's `return = { status, location | body }`,
//! and `internal` as `internal = true`.
//!
//! Owns which `return`s carry over: a final status calmcache accepts (not
//! 444, which closes without answering), a redirect with its URL, a body,
//! and only the variables calmcache's values know (`$request_method` is
//! its `$method`); the rest is left to a comment by the caller. It must
//! not decide where the route goes.

use super::super::toml_out::Value;
use super::super::tree::Directive;
use super::super::variables::variables;

/// The statuses NGINX's `return CODE URL` redirects with.
const REDIRECTS: [i64; 5] = [301, 302, 303, 307, 308];

/// `return ...` as the route's `return` table, or why not.
pub(super) fn return_table(d: &Directive) -> Result<Value, String> {
    let (status, rest) = match d.args.as_slice() {
        [url] if is_url(url) => (302, Some(url.as_str())),
        [code] => (code_of(code)?, None),
        [code, rest] => (code_of(code)?, Some(rest.as_str())),
        _ => return Err("not a return NGINX accepts".into()),
    };
    if status == 444 {
        return Err("444 closes the connection without an answer, which calmcache does not do: use 403 or 404".into());
    }
    if !(200..=599).contains(&status) {
        return Err(format!(
            "calmcache's return takes a final status, 200 to 599, not {status}"
        ));
    }
    let mut table = vec![("status".to_owned(), Value::Int(status))];
    match rest {
        Some(text) => {
            let key = if REDIRECTS.contains(&status) {
                "location"
            } else {
                "body"
            };
            table.push((key.to_owned(), Value::Str(variables(text)?)));
        }
        None if REDIRECTS.contains(&status) => {
            return Err("a redirect without a URL".into());
        }
        None => {}
    }
    Ok(Value::Table(table))
}

fn is_url(arg: &str) -> bool {
    ["http://", "https://", "$scheme"]
        .iter()
        .any(|p| arg.starts_with(p))
}

fn code_of(code: &str) -> Result<i64, String> {
    code.parse::<i64>()
        .map_err(|_| format!("{code:?} is not a status"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::import_nginx::tree::parse_text;

    fn table(text: &str) -> Result<Value, String> {
        let tree = parse_text(text, "t.conf", std::path::Path::new("/")).unwrap();
        return_table(&tree[0])
    }

    #[test]
    fn returns_carry_their_status_url_and_body() {
        let v = table("return 301 https://$host$request_uri;").unwrap();
        assert_eq!(
            v,
            Value::Table(vec![
                ("status".into(), Value::Int(301)),
                (
                    "location".into(),
                    Value::Str("https://$host$request_uri".into())
                ),
            ])
        );
        let v = table("return https://example.com/;").unwrap();
        assert!(matches!(&v, Value::Table(t) if t[0].1 == Value::Int(302)));
        let v = table("return 200 \"ok $request_method\";").unwrap();
        assert!(matches!(&v, Value::Table(t) if t[1].1 == Value::Str("ok $method".into())));
        assert_eq!(
            table("return 204;").unwrap(),
            Value::Table(vec![("status".into(), Value::Int(204))])
        );
    }

    #[test]
    fn returns_calmcache_cannot_say_are_refused() {
        assert!(table("return 444;").unwrap_err().contains("444"));
        assert!(table("return 301 https://$server_name$request_uri;")
            .unwrap_err()
            .contains("$server_name"));
        assert!(table("return 301;").is_err());
        assert!(table("return 100;").is_err());
    }
}
