//! Cache key templates (`key = "$scheme$host$uri$is_args$args"`), compiled
//! once from the config and rendered per request.
