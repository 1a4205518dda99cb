//! Request conditions for `bypass` and `no_store` (`"cookie:NAME"`,
//! `"header:NAME"`, `"arg:NAME"`), parsed once from the config.
