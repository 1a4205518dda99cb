//! NGINX variables in a value (`return`'s URL or text, `hash`'s key) as
//! calmcache's templates write them: the ones a `key` knows by the same
//! name, `$request_method` as `$method`. It must not know where the value
//! goes.

use crate::config::key_template;

/// `text` with NGINX's variables as calmcache writes them, or the first one
/// calmcache does not know.
pub(crate) fn variables(text: &str) -> Result<String, String> {
    variables_with(text, &[])
}

/// [`variables`], with `extra` names known too (a header value's
/// `$remote_addr`, ...).
pub(crate) fn variables_with(text: &str, extra: &[&str]) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if after.starts_with('{') {
            return Err("a variable in braces (${name}): write it without them".into());
        }
        let len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let name = match &after[..len] {
            "request_method" => "method",
            n => n,
        };
        if key_template::variable(name).is_err() && !extra.contains(&name) {
            return Err(format!(
                "${} is not a variable calmcache knows ($scheme, $host, $uri, $args, \
                 $is_args, $request_uri, $request_method, $arg_NAME, $http_NAME, $cookie_NAME)",
                &after[..len]
            ));
        }
        out.push('$');
        out.push_str(name);
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}
