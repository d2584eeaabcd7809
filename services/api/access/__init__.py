"""Who may call what: authentication, tenant scoping, idempotency keys, protective headers.

Also the configuration files the API re-reads when they change (tokens, tenants).
"""
