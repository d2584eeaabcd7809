"""The ingress relay: tenants' ingress topics in, checked commands out to cronlog.commands."""
