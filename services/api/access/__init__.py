"""Who may call what: authentication, tenant scoping, idempotency keys, protective headers."""
